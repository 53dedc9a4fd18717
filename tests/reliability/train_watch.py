"""Helpers of faults_train_save.sh's watchers, which poll a running shardrt-train job from Python (bash would be
too slow to see a save of a few milliseconds)."""
import glob
import json
import os
import time


def committed_step(ckpt):
    """The training step of the checkpoint committed in directory `ckpt`, 0 while there is none."""
    try:
        with open(os.path.join(ckpt, "index.json")) as f:
            return json.load(f)["state"]["train"]["step"]
    except (OSError, ValueError, KeyError):
        return 0


def rank_pids(tag):
    """{rank: pid} of the shardrt-train processes whose environment has SHARDRT_FAULTS_JOB=tag, by the rank
    OpenMPI puts in each one's environment."""
    ranks = {}
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if not f.read().split(b"\0")[0].endswith(b"shardrt-train"):
                    continue
            with open(f"/proc/{p}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            if env.get(b"SHARDRT_FAULTS_JOB") == tag.encode():
                ranks[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(p)
        except (OSError, ValueError, KeyError):
            continue
    return ranks


def strike_mid_save(job, ckpt, tag, n_ranks, delay_ms, strike, give_up_s=60):
    """Watches `job` (a Popen of mpiexec whose ranks carry SHARDRT_FAULTS_JOB=tag): once it has committed a
    checkpoint in `ckpt`, finds its n_ranks ranks, then the moment a save's staging directory (<ckpt>.tmp-*)
    appears waits delay_ms and calls strike(ranks). Returns (ranks, the time of the strike or None when the job
    ended or give_up_s passed first)."""
    give_up = time.time() + give_up_s
    ranks = {}
    while job.poll() is None and time.time() < give_up:
        if len(ranks) < n_ranks:
            if committed_step(ckpt) >= 1:
                ranks = rank_pids(tag)  # before the watch: walking /proc takes longer than a save
            time.sleep(0.002)
        elif glob.glob(ckpt + ".tmp-*"):
            if delay_ms:
                time.sleep(delay_ms / 1000)
            strike(ranks)
            return ranks, time.time()
        else:
            time.sleep(0.0002)  # leave the two cores to the ranks
    return ranks, None
