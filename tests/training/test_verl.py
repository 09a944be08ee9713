"""The verl integration against verl's own code.

Without Ray: the estimator ``rredcot`` through verl's ``compute_advantage`` and registry, with
verl's GRPO as the reference, and the workers' scoring function on verl's TensorDict rows.
With Ray and verl's TransferQueue (one local cluster for the module): verl's ``RayWorkerGroup``
over two worker processes of our worker class, dispatching and collecting as verl does for
``compute_log_prob``; the v1 trainer's own advantage step; the legacy trainer's hook. What
stands in: verl's training engine (a full local model behind ``get_per_tensor_param``, where
verl has FSDP shards on GPUs), since verl's engines need CUDA. Also runs the recipe of
docs/training/verl.md and composes examples/verl/rredcot.yaml with verl's config.
"""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import ROOT

verl = pytest.importorskip(
    "verl", reason="verl is not installed (make install installs it: pip install --no-deps verl)"
)
from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.single_controller.base.decorator import Dispatch, register  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo import core_algos, ray_trainer  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

from cotcredit.errors import UserError  # noqa: E402
from cotcredit.training import verl as rv  # noqa: E402
from cotcredit.training import verl_workers  # noqa: E402
from cotcredit.training.online import OnlineRredcot  # noqa: E402

PROMPTS = ["What is 3 + 4?", "What is 5 + 7?", "A pear costs 4. Two pears?"]
ANSWERS = ["7", "12", "8"]
RESPONSES = [
    ["Let me think step by step.\nFirst, 3 + 4 = 7.\nWait, check again.\nSo it is 7.\n"
     "The final answer is $\\boxed{7}$.",
     "Hmm, 3 + 4 = 8?\nActually no.\nThe final answer is $\\boxed{8}$."],
    ["Now add them: 5 + 7 = 12.\nSo 12.\nThe final answer is $\\boxed{12}$.",
     "Apples cost 5 dollars.\nBut oranges cost 7.\nThe final answer is $\\boxed{12}$."],
    ["The price of a pear is 4.\nNext, multiply by 2 to get 8.\nThe final answer is $\\boxed{8}$.",
     "Finally we are done.\nThe final answer is $\\boxed{9}$."],
]
SCORES = [[1.0, 0.0], [1.0, 1.0], [0.75, -0.5]]  # group 1 is tied: GRPO advantage 0
OPTIONS = {"segments": 3, "strength": 3.0}


def completions(tokenizer, encode_prompt) -> list[tuple[str, list[int], list[int], float]]:
    """(group id, prompt ids, response ids ending with EOS, score) of the six completions."""
    out = []
    for g in range(3):
        for j in range(2):
            r = tokenizer.encode(RESPONSES[g][j], add_special_tokens=False)
            out.append((f"u{g}", encode_prompt(PROMPTS[g]), r + [tokenizer.eos_token_id],
                        SCORES[g][j]))
    return out


def rollout_batch(scorer) -> DataProto:
    """A batch as verl's legacy trainer holds it: left-padded prompts, right-padded responses,
    the score at the last response token, group ids and ground truth."""
    rows = completions(scorer.tokenizer, scorer.encode_prompt)
    pad = scorer.tokenizer.pad_token_id
    P = max(len(p) for _, p, _, _ in rows)
    R = max(len(r) for _, _, r, _ in rows) + 2
    prompts = torch.full((len(rows), P), pad)
    responses = torch.full((len(rows), R), pad)
    attention = torch.zeros((len(rows), P + R), dtype=torch.long)
    scores = torch.zeros((len(rows), R))
    for i, (_, p, r, s) in enumerate(rows):
        prompts[i, P - len(p):] = torch.tensor(p)
        responses[i, : len(r)] = torch.tensor(r)
        attention[i, P - len(p): P + len(r)] = 1
        scores[i, len(r) - 1] = s
    data = DataProto.from_dict(
        tensors={
            "prompts": prompts, "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1), "attention_mask": attention,
            "response_mask": attention[:, P:].clone(), "token_level_scores": scores,
        },
        non_tensors={
            "uid": np.array([u for u, *_ in rows], dtype=object),
            "reward_model": np.array([{"ground_truth": ANSWERS[int(u[1])]} for u, *_ in rows],
                                     dtype=object),
        },
    )
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]  # no KL in reward
    return data


def verl_advantages(data: DataProto, estimator: str) -> torch.Tensor:
    out = ray_trainer.compute_advantage(
        data, adv_estimator=estimator, config=AlgoConfig(adv_estimator=estimator)
    )
    return out.batch["advantages"]


@pytest.fixture
def credit(scorer):
    return OnlineRredcot(scorer.model, scorer.tokenizer, segments=3, on_unscorable="skip")


def scored_locally(data: DataProto, credit: OnlineRredcot):
    """What the workers return for this batch, computed here with `credit`."""
    from cotcredit.training.verl_trainers import legacy_rows

    fields, uids, mask = legacy_rows(data)
    out = verl_workers.score_rows(tu.get_tensordict(fields), credit)
    return uids, mask, tu.get(out, rv.REWARDS), tu.get(out, rv.SPANS)


def rredcot_advantages(data: DataProto, credit: OnlineRredcot, **options) -> torch.Tensor:
    uids, mask, rewards, spans = scored_locally(data, credit)
    with rv.credit_handed_to_estimator(uids, mask, rewards, spans,
                                       rv.credit_options(OPTIONS | options)):
        return verl_advantages(data, "rredcot")


# ---- the estimator ------------------------------------------------------------------------------
def test_rredcot_keeps_verls_grpo_totals_and_signs(scorer, credit):
    assert core_algos.get_adv_estimator_fn("rredcot") is rv.compute_rredcot_advantage
    grpo = verl_advantages(rollout_batch(scorer), "grpo")
    data = rollout_batch(scorer)
    adv = rredcot_advantages(data, credit)
    mask = data.batch["response_mask"].bool()
    assert torch.allclose(adv.sum(1), grpo.sum(1), atol=1e-5)  # each completion's total
    assert torch.all(adv[~mask] == 0)
    assert torch.all(torch.sign(adv[mask]) == torch.sign(grpo[mask]))
    moved = [i for i in range(6) if not torch.allclose(adv[i][mask[i]], grpo[i][mask[i]])]
    assert moved and set(moved) <= {0, 1, 4, 5}
    assert torch.equal(adv[2], grpo[2]) and torch.equal(adv[3], grpo[3])  # the tied group


def test_the_credit_is_the_online_apis_with_verls_score_as_outcome(scorer, credit):
    data = rollout_batch(scorer)
    _, mask, rewards, spans = scored_locally(data, credit)
    assert [bool(r) for r in rewards] == [True, True, False, False, True, True]
    P = data.batch["prompts"].shape[1]
    for i in (0, 1, 4, 5):
        n = int(mask[i].sum())
        direct = credit.score_one(
            data.batch["prompts"][i][data.batch["attention_mask"][i, :P].bool()].tolist(),
            data.batch["responses"][i, :n].tolist(), ANSWERS[i // 2],
            outcome=float(data.batch["token_level_scores"][i].sum()),
        )
        assert rewards[i] == pytest.approx(direct.rewards, abs=1e-9)
        assert [tuple(s) for s in spans[i]] == direct.spans
        assert sum(rewards[i]) == pytest.approx(direct.outcome - direct.g[0], abs=1e-9)


def test_strength_zero_is_verls_grpo_exactly(scorer, credit):
    grpo = verl_advantages(rollout_batch(scorer), "grpo")
    assert torch.equal(rredcot_advantages(rollout_batch(scorer), credit, strength=0.0), grpo)


def test_the_estimator_without_credit_says_what_to_do(scorer):
    with pytest.raises(ValueError, match="no segment credit was handed over.*verl_trainers"):
        verl_advantages(copy.deepcopy(rollout_batch(scorer)), "rredcot")


def test_credit_of_another_batch_is_refused(scorer, credit):
    data = rollout_batch(scorer)
    uids, mask, rewards, spans = scored_locally(data, credit)
    options = rv.credit_options(OPTIONS)
    with rv.credit_handed_to_estimator(uids[::-1], mask, rewards, spans, options):
        with pytest.raises(ValueError, match="credit is for another batch"):
            verl_advantages(data, "rredcot")
    with rv.credit_handed_to_estimator(uids[:4], mask[:4], rewards[:4], spans[:4], options):
        with pytest.raises(ValueError, match="credit is for another batch"):
            verl_advantages(data, "rredcot")


def test_options_reach_rredcot_whatever_they_are():
    o = rv.credit_options({})
    assert (o.rredcot.value, o.rredcot.sum_to) == ("rhat", "advantage")  # as `cotcredit train`
    assert (o.segments, o.score_with, o.strength) == (8, "actor", 3.0)
    o = rv.credit_options({"value": "both", "forcing.exit_string": "\nSo: ", "segments": "lines",
                           "vhat_weight": 0.5, "score_with": "reference"})
    assert (o.rredcot.value, o.rredcot.forcing.exit_string, o.rredcot.vhat_weight) == (
        "both", "\nSo: ", 0.5)
    assert (o.segments, o.score_with) == ("lines", "reference")
    with pytest.raises(UserError, match="algorithm.rredcot: unknown option 'strenght'"):
        rv.credit_options({"strenght": 2})
    with pytest.raises(UserError, match="algorithm.rredcot: --score-with must be one of actor"):
        rv.credit_options({"score_with": "critic"})


# ---- the workers' function on verl's rows ---------------------------------------------------
def test_score_rows_scores_flagged_rows_of_verls_tensordicts(scorer, credit):
    from cotcredit.training.verl_trainers import legacy_rows

    fields, _, _ = legacy_rows(rollout_batch(scorer))
    jagged = verl_workers.score_rows(tu.get_tensordict(fields), credit)
    # Rows of equal length come back from the TransferQueue as a plain (B, T) tensor.
    same = {**fields, "responses": torch.stack([fields["responses"][0]] * 6),
            "prompts": torch.stack([fields["prompts"][0]] * 6)}
    del same["response_mask"]
    plain = verl_workers.score_rows(tu.get_tensordict(same), credit)
    assert tu.get(jagged, rv.REWARDS)[0] == tu.get(plain, rv.REWARDS)[0]
    # A response with masked tokens inside (tool output) and an unflagged row: not scored.
    masked = list(fields["response_mask"].unbind())
    masked[0] = masked[0].clone()
    masked[0][2] = 0
    fields[rv.SCORE] = fields[rv.SCORE].clone()
    fields[rv.SCORE][1] = False
    fields["response_mask"] = torch.nested.as_nested_tensor(masked, layout=torch.jagged)
    rewards = tu.get(verl_workers.score_rows(tu.get_tensordict(fields), credit), rv.REWARDS)
    assert rewards[0] == [] and rewards[1] == [] and rewards[4] and rewards[5]
    del fields["reward_model"]
    with pytest.raises(UserError, match="reward_model.ground_truth"):
        verl_workers.score_rows(tu.get_tensordict(fields), credit)


class StandInEngine:
    """verl's training engine as the worker sees it: the actor's weights behind
    ``get_per_tensor_param`` (full HF-named tensors, as verl streams them to the rollout)."""

    def __init__(self, model_dir: Path | str):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.module = AutoModelForCausalLM.from_pretrained(model_dir)
        self.model_config = SimpleNamespace(
            tokenizer=AutoTokenizer.from_pretrained(model_dir), hf_config=self.module.config,
            local_path=str(model_dir), path=str(model_dir),
        )
        self.adapter = None

    def get_per_tensor_param(self):
        return ((n, p.detach().clone()) for n, p in self.module.state_dict().items()), self.adapter

    def is_mp_src_rank_with_outputs(self) -> bool:
        return True


def update_step(model, tokenizer, lr: float = 0.5) -> None:
    """One SGD step of the language-model loss on a fixed text (deterministic on a CPU)."""
    ids = torch.tensor([tokenizer.encode("So 5 + 7 = 12. The final answer is 12.")])
    model.train()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.sub_(lr * p.grad)
                p.grad = None
    model.eval()


def test_the_scoring_copy_holds_every_current_weight(tiny_model_dir):
    engine = StandInEngine(tiny_model_dir)
    worker = SimpleNamespace(_rredcot_copy=None)
    options = rv.credit_options({})
    model = verl_workers.CreditWorker._rredcot_model(worker, engine, options)
    assert model is not engine.module
    for (name, a), b in zip(engine.module.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), name
    update_step(engine.module, engine.model_config.tokenizer)
    again = verl_workers.CreditWorker._rredcot_model(worker, engine, options)
    assert again is model  # the copy is kept, its weights refreshed
    assert all(torch.equal(a, b) for a, b in zip(engine.module.state_dict().values(),
                                                  model.state_dict().values()))
    engine.adapter = {"r": 8}
    with pytest.raises(UserError, match="lora.merge=true"):
        verl_workers.load_current_weights(model, engine)


def test_the_trainers_give_their_actor_workers_the_scoring_method():
    import ray
    from verl.trainer.ppo.utils import Role
    from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

    from cotcredit.training.verl_trainers import _with_credit_workers

    class OtherActorWorker(ActorRolloutRefWorker):  # e.g. verl's separate_async worker
        pass

    mapping = {Role.ActorRollout: ray.remote(ActorRolloutRefWorker),
               Role.RefPolicy: ray.remote(OtherActorWorker),
               Role.Critic: ray.remote(TrainingWorker)}
    _with_credit_workers(mapping)
    actor = mapping[Role.ActorRollout].__ray_actor_class__
    assert actor is verl_workers.RredcotActorRolloutRefWorker
    assert mapping[Role.Critic].__ray_actor_class__ is TrainingWorker
    assert mapping[Role.RefPolicy].__ray_actor_class__ is OtherActorWorker  # not an actor role
    other = verl_workers.with_credit_worker(OtherActorWorker)
    assert issubclass(other, OtherActorWorker) and hasattr(other, "compute_segment_credit")


# ---- verl's worker group, the v1 and the legacy trainer (Ray + TransferQueue) -------------------
class StandInWorker(verl_workers.RredcotActorRolloutRefWorker):
    """Our worker class with a stand-in engine, one process per data-parallel rank."""

    def __init__(self, rank: int, model_dir: str):  # verl's __init__ sets up torch.distributed
        self._Worker__dispatch_dp_rank, self._Worker__collect_dp_rank = {}, {}
        self._register_dispatch_collect_info("actor", dp_rank=rank, is_collect=True)
        self.actor = SimpleNamespace(engine=StandInEngine(model_dir))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def train_step(self):
        engine = self.actor.engine
        update_step(engine.module, engine.model_config.tokenizer)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def loaded_models(self) -> int:
        return 0 if self._rredcot_copy is None else 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local Ray cluster with verl's TransferQueue and a worker group of two ranks."""
    tq = pytest.importorskip("transfer_queue", reason="verl's v1 trainer needs TransferQueue")
    import ray
    from conftest import build_tiny_model_dir
    from ray import cloudpickle
    from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup

    model_dir = build_tiny_model_dir(tmp_path_factory.mktemp("verl-actor"))
    cloudpickle.register_pickle_by_value(__import__(__name__))  # this module's classes
    # Ray runs its workers at nice 15: beside any other work on the machine they starved
    # (TransferQueue's start alone took 79 s beside two busy processes, 9 s at nice 0).
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             _system_config={"worker_niceness": 0},
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}})
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    remote = ray.remote(StandInWorker)
    workers = [remote.options(num_cpus=0).remote(rank, str(model_dir)) for rank in range(2)]
    group = RayWorkerGroup(ray_cls_with_init=RayClassWithInitArgs(cls=remote),
                           worker_handles=workers, use_gpu=False)
    try:
        yield SimpleNamespace(group=group, model_dir=model_dir, tq=tq)
    finally:
        tq.close()
        ray.shutdown()


def put_rows(tq, scorer, tag: str):
    """The six completions in the TransferQueue as verl's agent loop puts them (one record per
    completion, unpadded, every dataset column alongside); the batch the trainer holds."""
    from transfer_queue import KVBatchMeta
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    rows = completions(scorer.tokenizer, scorer.encode_prompt)
    keys, fields = [], []
    for i, (uid, p, r, s) in enumerate(rows):
        keys.append(f"{uid}-{tag}_{i % 2}_0")
        rm = torch.zeros(len(r))
        rm[-1] = s
        fields.append({"prompts": torch.tensor(p), "responses": torch.tensor(r),
                       "response_mask": torch.ones(len(r), dtype=torch.long), "rm_scores": rm,
                       "uid": f"{uid}-{tag}",
                       "reward_model": {"ground_truth": ANSWERS[int(uid[1])]}})
    tq.kv_batch_put(keys=keys, fields=list_of_dict_to_tensordict(fields), tags=[{}] * 6,
                    partition_id="train")
    return KVBatchMeta(keys=keys, tags=[{}] * 6, partition_id="train")


def v1_trainer(group, **options):
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from cotcredit.training.verl_trainers import with_segment_credit

    cls = with_segment_credit(PPOTrainerSync)
    trainer = cls.__new__(cls)  # no Ray placement, no engines: the advantage step alone
    trainer.config = OmegaConf.create({
        "algorithm": {"adv_estimator": "rredcot", "gamma": 1.0, "lam": 1.0,
                      "use_kl_in_reward": False, "norm_adv_by_std_in_grpo": True,
                      "rredcot": OPTIONS | options},
        "actor_rollout_ref": {"rollout": {"n": 2}},
    })
    trainer.actor_rollout_wg = group
    return trainer


def v1_step(cluster, scorer, tag: str, **options):
    """The v1 trainer's advantage step on fresh rows: (advantages (B, T), response mask,
    the credit's rewards per row, metrics)."""
    tq = cluster.tq
    meta = put_rows(tq, scorer, tag)
    metrics: dict = {}
    v1_trainer(cluster.group, **options)._compute_advantage(meta, metrics)
    out = tq.kv_batch_get(keys=meta.keys, partition_id="train",
                          select_fields=["advantages", "response_mask"]).to_padded_tensor()
    rewards = list(tq.kv_batch_get(keys=meta.keys, partition_id="train",
                                   select_fields=[rv.REWARDS])[rv.REWARDS])
    return out["advantages"], out["response_mask"], rewards, metrics


def grpo_of(mask: torch.Tensor) -> torch.Tensor:
    """verl's own GRPO advantages of the six completions, padded to `mask`'s width."""
    scores = torch.zeros(mask.shape)
    flat = [s for group in SCORES for s in group]
    for i, n in enumerate(mask.sum(1).tolist()):
        scores[i, int(n) - 1] = flat[i]
    data = DataProto.from_dict(tensors={"token_level_rewards": scores, "response_mask": mask},
                               non_tensors={"uid": np.array([f"u{i // 2}" for i in range(6)],
                                                            dtype=object)})
    return verl_advantages(data, "grpo")


def local_rewards(model, tokenizer, scorer, **options) -> list:
    """The credit computed directly with OnlineRredcot on `model` (the expected numbers)."""
    o = rv.credit_options(OPTIONS | options)
    credit = OnlineRredcot(model, tokenizer, o.rredcot, segments=o.segments,
                           on_unscorable="skip")
    rows = completions(scorer.tokenizer, scorer.encode_prompt)
    out = []
    for uid, p, r, s in rows:
        got = credit.score_one(p, r, ANSWERS[int(uid[1])], outcome=s) if uid != "u1" else None
        out.append(got.rewards if got is not None else [])
    return out


@pytest.fixture
def no_model_here(monkeypatch):
    """Fail if this process (the trainer's) loads or builds a model."""
    from transformers import AutoModelForCausalLM, PreTrainedModel

    def refuse(*args, **kwargs):
        raise AssertionError("the trainer process loaded a model")

    for name in ("from_pretrained", "from_config"):
        monkeypatch.setattr(AutoModelForCausalLM, name, refuse)
    monkeypatch.setattr(PreTrainedModel, "__init__", refuse)
    monkeypatch.setattr(OnlineRredcot, "__init__", refuse)


def test_v1_trainer_scores_in_the_workers(cluster, scorer, no_model_here):
    adv, mask, rewards, metrics = v1_step(cluster, scorer, "a")
    grpo = grpo_of(mask)
    m = mask.bool()
    assert torch.allclose(adv.sum(1), grpo.sum(1), atol=1e-5)
    assert torch.all(torch.sign(adv[m]) == torch.sign(grpo[m]))
    assert [bool(r) for r in rewards] == [True, True, False, False, True, True]
    assert metrics["rredcot/scored_fraction"] == pytest.approx(4 / 6)
    assert cluster.group.loaded_models() == [1, 1]  # both ranks scored
    zero, _, _, _ = v1_step(cluster, scorer, "b", strength=0.0)
    assert torch.equal(zero, grpo)  # strength 0: verl's GRPO, bit for bit



def same_credit(a: list, b: list, tol: float = 1e-9) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(abs(u - v) <= tol for u, v in zip(x, y)) for x, y in zip(a, b)
    )


def test_credit_follows_the_actors_updates(cluster, scorer):
    from transformers import AutoTokenizer

    local = StandInEngine(cluster.model_dir)
    tok = AutoTokenizer.from_pretrained(cluster.model_dir)
    _, _, before, _ = v1_step(cluster, scorer, "c")
    assert same_credit(before, local_rewards(local.module, tok, scorer))
    cluster.group.train_step()  # the actor's weights change on every rank
    update_step(local.module, tok)
    _, _, after, _ = v1_step(cluster, scorer, "d")
    _, _, reference, _ = v1_step(cluster, scorer, "e", score_with="reference")
    assert not same_credit(after, before)
    assert same_credit(after, local_rewards(local.module, tok, scorer))
    assert same_credit(reference, before)  # the starting weights


def test_legacy_trainer_gets_the_same_advantages(cluster, scorer, no_model_here):
    from cotcredit.training.verl_trainers import RredcotRayPPOTrainer, _routed_compute_advantage

    v1_adv, v1_mask, _, _ = v1_step(cluster, scorer, "f")
    trainer = RredcotRayPPOTrainer.__new__(RredcotRayPPOTrainer)
    trainer.config = v1_trainer(cluster.group).config
    trainer.actor_rollout_wg = cluster.group
    data = rollout_batch(scorer)
    with _routed_compute_advantage(ray_trainer, trainer):
        out = ray_trainer.compute_advantage(
            data, adv_estimator="rredcot", norm_adv_by_std_in_grpo=True,
            config=trainer.config.algorithm,
        )
    assert ray_trainer.compute_advantage.__name__ == "compute_advantage"  # restored
    adv, width = out.batch["advantages"], v1_adv.shape[1]
    assert torch.equal(adv[:, :width] * v1_mask, v1_adv)
    assert trainer.rredcot_metrics["rredcot/scored_fraction"] == pytest.approx(4 / 6)


def test_the_docs_recipe_runs(cluster, scorer):
    import re

    page = ROOT / "docs" / "training" / "verl.md"
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"),
                                      flags=re.S) if "advantage_with_credit(" in b]
    config = SimpleNamespace(algorithm=v1_trainer(cluster.group).config.algorithm)
    namespace = {"batch": rollout_batch(scorer), "actor_rollout_wg": cluster.group,
                 "config": config}
    exec(compile(block, str(page), "exec"), namespace)
    grpo = verl_advantages(rollout_batch(scorer), "grpo")
    adv = namespace["batch"].batch["advantages"]
    assert torch.allclose(adv.sum(1), grpo.sum(1), atol=1e-5)
    assert namespace["metrics"]["rredcot/scored_fraction"] == pytest.approx(4 / 6)


def test_the_example_config_is_verls_default_trainer_with_rredcot():
    from hydra import compose, initialize_config_dir

    folder = ROOT / "examples" / "verl"
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        cfg = compose(config_name="rredcot")
    assert cfg.trainer.use_v1 is True and cfg.algorithm.adv_estimator == "rredcot"
    options = rv.credit_options(rv.options_dict(cfg.algorithm.rredcot))
    assert (options.score_with, options.rredcot.value, options.strength) == ("actor", "rhat", 3.0)
