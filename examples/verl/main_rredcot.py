"""verl's PPO/GRPO trainer (its RayPPOTrainer path) with RREDCoT segment credit.

    pip install 'cotcredit[verl]' && pip install --no-deps verl==0.9.1
    python examples/verl/main_rredcot.py --config-name rredcot --config-path "$PWD/examples/verl" \
        data.train_files=train.parquet data.val_files=val.parquet \
        actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct

Everything is verl's `main_ppo` except two things: `cotcredit.integrations.verl` is imported
(it registers the advantage estimator `rredcot`) and the TaskRunner builds
`RredcotRayPPOTrainer`, whose hook scores each rollout batch before verl computes advantages
(where that runs and what it costs: docs/use-in-your-trainer.md). The reward is verl's (the
data's `reward_model.ground_truth` is also the reference answer RREDCoT forces). Not run by this
repository's tests: it needs GPUs and a Ray cluster; tests/test_verl.py runs the estimator, the
hook and verl's compute_advantage on CPU.
"""

import ray
from verl.trainer import main_ppo_v0
from verl.trainer.main_ppo import main as verl_main

import cotcredit.integrations.verl  # noqa: F401  (registers adv_estimator "rredcot" here)


@ray.remote(num_cpus=1)
class RredcotTaskRunner(main_ppo_v0.TaskRunner.__ray_actor_class__):
    def run(self, config):
        from cotcredit.integrations import verl as rredcot_verl

        # This actor builds the trainer: give it the one with the RREDCoT hook.
        main_ppo_v0.RayPPOTrainer = rredcot_verl.RredcotRayPPOTrainer
        return super().run(config)


if __name__ == "__main__":
    # verl's own entry point (config, validation, Ray); it takes the TaskRunner from main_ppo_v0.
    main_ppo_v0.TaskRunner = RredcotTaskRunner
    verl_main()
