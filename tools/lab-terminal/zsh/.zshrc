# zsh in a JupyterLab terminal under `make lab` (see ../shell.sh): the learner's own .zshrc, then the course's environment.
ZDOTDIR="$DDP_LAB_ZDOTDIR"
if [ -f "$ZDOTDIR/.zshrc" ]; then . "$ZDOTDIR/.zshrc"; fi
export PATH="$DDP_LAB_VENV_BIN:$PATH" VIRTUAL_ENV="$(dirname "$DDP_LAB_VENV_BIN")"
