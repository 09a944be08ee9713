"""Run by tests/pipeline/test_distributed.py under torchrun: `cotcredit.train(config)` in every
process, recording what each process's RREDCoT step hands to the loss (adv-rank<N>.jsonl in
OUT), so the test can check the per-token invariants process by process.

    python -m torch.distributed.run --nproc-per-node 2 tests/launch_train.py CONFIG OUT [--resume]
"""
import json
import os
import sys

import torch

from cotcredit.training import trainer as trainer_mod
from cotcredit.training.run import train

out_dir = sys.argv[2]
original = trainer_mod.RredcotGRPOTrainer._rredcot_advantages


def recording(self, output):
    token_adv = original(self, output)
    rank = self.accelerator.process_index
    mask = output["completion_mask"].bool()
    plain = output["advantages"]
    rows = []
    for i in range(len(plain)):
        n = int(mask[i].sum())
        rows.append({"A": float(plain[i]), "n": n, "sum": float(token_adv[i, :n].sum()),
                     "signs_ok": bool(((token_adv[i, :n] * plain[i]) >= 0).all()),
                     "pad_zero": bool((token_adv[i, n:] == 0).all())})
    with open(os.path.join(out_dir, f"adv-rank{rank}.jsonl"), "a") as fh:
        fh.write(json.dumps({"world": self.accelerator.num_processes, "rows": rows}) + "\n")
    return token_adv


trainer_mod.RredcotGRPOTrainer._rredcot_advantages = recording
torch.set_num_threads(1)
def even(completion_ids, **kwargs):  # a reward with variance for the random tiny model
    return [sum(t % 2 == 0 for t in ids) / max(len(ids), 1) for ids in completion_ids]


result = train(sys.argv[1], resume="--resume" in sys.argv, extra_rewards=[even])
print("STEP", result.global_step, "RANK", os.environ.get("RANK"))
