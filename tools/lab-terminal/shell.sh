#!/bin/sh
# The shell of JupyterLab's terminals under `make lab`: the learner's own shell with its start-up
# files read, and then the course's environment first on PATH, so that `python -m ddp_lab grade`
# finds ddp_lab and torch whatever ~/.bashrc or ~/.zshrc put first (conda, pyenv, a system Python).
# `make lab` sets DDP_LAB_VENV_BIN (the venv's bin folder) and points the terminals here.
here=$(dirname "$0")
shell=${SHELL:-/bin/sh}
case $(basename "$shell") in
    bash) exec "$shell" --rcfile "$here/bashrc" -i ;;
    zsh) DDP_LAB_ZDOTDIR=${ZDOTDIR:-$HOME} ZDOTDIR="$here/zsh" exec "$shell" -i ;;
    *) PATH="$DDP_LAB_VENV_BIN:$PATH" exec "$shell" -i ;;
esac
