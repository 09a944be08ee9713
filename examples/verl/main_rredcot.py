"""verl's PPO/GRPO trainer with RREDCoT segment credit (both of verl's trainers; v1 by default).

    pip install 'cotcredit[verl]' && pip install --no-deps verl==0.9.1
    python examples/verl/main_rredcot.py --config-path "$PWD/examples/verl" --config-name rredcot \
        data.train_files=train.parquet data.val_files=val.parquet \
        actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct

The same as `python -m cotcredit.training.verl_trainers ...`: verl's `main_ppo` whose actor
workers also compute RREDCoT credit with the actor's current weights, and whose advantage step
asks them for it when `algorithm.adv_estimator=rredcot` (docs/training/verl.md). It needs GPUs
and a Ray cluster; tests/training/test_verl.py runs its pieces on CPU with verl's own code.
"""

from cotcredit.training.verl_trainers import main

if __name__ == "__main__":
    main()
