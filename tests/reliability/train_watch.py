"""Helpers of faults_train_save.sh's watchers, which poll a running shardrt-train job from Python (bash would be
too slow to see a save of a few milliseconds)."""
import json
import os


def committed_step(ckpt):
    """The training step of the checkpoint committed in directory `ckpt`, 0 while there is none."""
    try:
        with open(os.path.join(ckpt, "index.json")) as f:
            return json.load(f)["state"]["train"]["step"]
    except (OSError, ValueError, KeyError):
        return 0
