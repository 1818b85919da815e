# zsh in a JupyterLab terminal under `make lab` (see ../shell.sh): the learner's own .zshenv first.
if [ -f "$DDP_LAB_ZDOTDIR/.zshenv" ]; then . "$DDP_LAB_ZDOTDIR/.zshenv"; fi
