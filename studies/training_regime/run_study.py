"""Where does step credit matter for GRPO here? A regime where perfect credit (the checker's
oracle) clearly beats plain GRPO, every credit source on it, and a confirmatory rerun of
RREDCoT against GRPO on `unique`.

    python -m studies.training_regime.run_study pilot               # stage 1, then stage 2
    python -m studies.training_regime.run_study power --write       # main_plan.json (amendment 4)
    python -m studies.training_regime.run_study main                # look by look (main_looks.json)
    python -m studies.training_regime.run_study confirm             # the confirmatory unique run
    python -m studies.training_regime.run_study summary pilot|main|confirm
    python -m studies.training_regime.run_study reproduce main --arm grpo --seed 100  # amendment 5

Every run is `cotcredit.train` on a bench regime's checkpoint; the arms of a setup differ only
in the credit source and form (`setups.ARMS`), the setups only in the regime (`setups.SETUPS`).
Runs are resumable (a finished run is skipped, a started one continues from its last
checkpoint, saved every 50 steps) and go seed by seed through the arms, so a study stopped
early stays balanced. Launch with `OMP_NUM_THREADS=1 nice -n 10`: the 0.8M-parameter models
gain nothing from more threads; for more cores start the same command once per core (each
process takes the next run no other holds, `claim`). Run folders (`runs/`, `configs/`,
`data/`) are not tracked; the summaries are.

PROTOCOL (committed before any run it governs; amendments are dated and say what had been seen)

Why: the earlier study (studies/training/) found perfect credit worth only +0.008 [+0.002,
+0.014] online on `unique` (17 seeds) and nothing on `multipath`, too little to tell any credit
source apart. This study first looks for a regime where the oracle's gain is large, then
compares the sources there.

Seen before this protocol was written (2026-12-05, 03:30): the earlier study's results; on
`long`, runs outside this study for timing and sizing only (seed 99 and seed 0, in /tmp, not
reused): one grpo run of 150 steps (training reward 0.56 over steps 1-25, about 0.76 over
steps 76-150; 4.7 s a step on the loaded machine, load average 6 on 2 cores), grpo and
oracle for 10 steps at seed 0 under a 320-token cap (dev accuracy 0.613 and 0.605: ten steps,
and a cap that cut about half of the completions; this study uses the regime's 384), steps of
16, 32 and 64 completions (time grows with the batch: no cheaper way to more completions),
and a few steps of rredcot (50-65 s a step with every completion scored, 10-13x grpo) and
Monte Carlo (4 rollouts per boundary: 30-73 s a step at every boundary, 50 s at most 8).
No oracle run longer than 10 steps, no result of any credit source on `long`.

Shared settings (the earlier study's; not tuned): learning rate 1e-4 with TRL's linear decay,
beta 0, Adam, temperature 1, 150 steps of 16 completions, one segment per reasoning line,
reweight strength 3 and floor 0, RREDCoT at the method's defaults with R̂ + v̂ (`value: both`,
exit string "The answer is "), `shuffled` = the oracle's rewards permuted within each
completion. Completions are capped at the regime's own sampling length (`long` 384 tokens,
`unique` 64). A run trains on the first 150 x prompts-per-step problems of its setup's train
file in an order fixed by the seed: every arm of a seed sees the same problems in the same
order, each once.

Metrics, per run:
- `online` (primary): the mean training reward over steps 76-150, 1,200 completions of
  problems the policy has never trained on.
- `held-out`: accuracy of the final checkpoint on 200 problems x 4 samples (temperature 1,
  sampling seed = the run's seed) of the setup's dev split in the pilot, of its test split in
  the main and confirmatory runs (no test split is sampled before those runs).
- cost: seconds per step (median over steps), the credit's seconds per step, and within each
  run step / (step - credit), which the machine's load does not move.
- `start`: the checkpoint's held-out accuracy before training, per setup (dev split, seed 0).
Every comparison is a paired difference by seed with its 95% t-interval over seeds.

1. PILOT. Candidate setups (what changes against `long`):
   - `long`: the `long` regime (20-40 steps, one valid path), 2 prompts x 8 completions.
   - `long-g4`: small groups, 4 prompts x 4 completions (the same 16 a step).
   - `long-hard`: only problems of 32-40 steps (train, dev and test filtered alike): a lower
     starting accuracy (a sparser reward) and more steps where one slip is fatal.
   - `unique-g4`: `unique` (3-6 steps) in groups of 4: small groups without long chains (the
     earlier study measured `unique` in groups of 8).
   Not candidates: harmless wrong steps (`forecast`'s check lines) give the oracle nothing to
   place in a wrong completion that `unique` does not (its first wrong step is in the forward
   chain); `multipath`, where the oracle did not beat grpo; a higher sampling temperature,
   which would change the metric itself. Arms: grpo, oracle (reweight), oracle-sr
   (segment-rewards).
   Stage 1 (screen): seeds 0 and 1 of every candidate (seed 0 of all four first). A
   candidate's score is the larger, over the two forms, of the mean oracle - grpo `online`
   over its two seeds. Chosen: among the candidates scoring at least +0.03, the one whose
   grpo step is cheapest (median seconds per step: the most main-study seeds per hour); if
   none scores +0.03, the highest-scoring one.
   The bar of +0.03 is on `online`, the pilot's development data (training problems the
   policy has not yet seen; the test split stays untouched); the dev split's held-out
   accuracy is reported beside it.
   Stage 2 (estimate): seeds 2-7 of the chosen candidate, same arms. The oracle's gain in
   each form is the mean oracle - grpo `online` over seeds 2-7 (not the seeds that chose the
   candidate), with its 95% t-interval. The candidate passes when a form's gain is at least
   +0.03 with its interval above 0. The main study's form is the one with the larger stage-2
   gain. If the candidate does not pass, the runner-up of stage 1 gets stage 2 too (once),
   and the main study takes whichever of the two has the larger stage-2 gain (best form);
   the report then says that +0.03 was not reached, and the largest gain that was.
   Reported (pilot_summary.md/.csv): per candidate and stage, oracle - grpo per form, online
   and dev accuracy, `start`, seconds per step.

2. POWER (an amendment after the pilot, committed before any main run). delta = half the
   chosen form's stage-2 gain; sigma_U = the one-sided upper 95% confidence bound of the SD
   of the paired `online` differences oracle - grpo in that form over seeds 0-7 (sigma-hat x
   sqrt((n-1) / chi2_{0.05, n-1})); n = the fewest seeds for which a two-sided paired t-test
   at 0.05 has power 0.8 against delta with SD sigma_U (noncentral t,
   `studies.training.summarize.seeds_for_power`). The amendment also gives the power of the
   default's rule (two intervals above 0, by simulation), the Monte Carlo configuration (from
   timings: rollouts per boundary, at most how many boundaries) and the CPU the plan needs.
   If n seeds of every arm cannot fit the machine, the amendment fixes instead a group-
   sequential plan: looks after every k seeds up to a maximum, Lan-DeMets O'Brien-Fleming
   alpha spending at an overall two-sided 0.05 per primary comparison, non-binding futility,
   and which arms run how far.

3. MAIN (held-out test), on the chosen setup, every credit arm in the chosen form: grpo,
   oracle, shuffled, rredcot, mc (Monte Carlo) and cheap (the value-tracking source the
   cost study, studies/value_cost/, recommends as cheapest, through its `cotcredit train`
   option; if none is recommended when every other arm has finished, Monte Carlo with one
   rollout per boundary, and the report says so). Seeds 100 to 100+n-1, never used before.
   Runs go seed by seed through grpo, oracle, shuffled, rredcot, mc; cheap after them.
   Reported (main_summary.md/.csv): per arm `online` and held-out accuracy; differences
   against grpo, against shuffled and against the oracle; the share of the oracle's gain
   recovered, (arm - grpo) / (oracle - grpo), with a percentile bootstrap interval over
   seeds; seconds per step, x grpo, and the within-run ratio.
   `train`'s default credit: among the sources a user has without a checker (rredcot, mc,
   cheap), those whose `online` beats grpo AND beats shuffled (both 95% intervals above 0);
   of those the cheapest (within-run ratio); if none, `grpo` stays the default.

4. CONFIRMATORY (`unique`, the earlier study's exact settings: 2 prompts x 8, 150 steps).
   The earlier 17-seed result rredcot - grpo `online` +0.009 [+0.003, +0.015] is a lead
   found after a cut; this run confirms or refutes it on new seeds. Arms grpo and rredcot
   (reweight). Seeds 1000-1031, seed by seed. Sized from the earlier 17 seeds: SD of the
   paired differences 0.0122, its upper 95% bound 0.0173; 80% power against +0.009 (the
   lead) at two-sided 0.05 takes 31 seeds; 32 for two equal halves. Power against +0.0045
   (half the lead) is about 0.3: a miss does not exclude a smaller effect.
   Sequential rule (Haybittle-Peto, one interim look): after seeds 1000-1015 stop and call
   it confirmed if the two-sided paired t-test gives p < 0.001; stop and call it not
   confirmed (non-binding futility) if the mean difference is at most 0; otherwise run
   seeds 1016-1031 and call it confirmed if the 95% t-interval of rredcot - grpo `online`
   over the 32 seeds lies above 0, not confirmed otherwise. The futility stop costs at most
   2% power at +0.009. Held-out test accuracy is reported beside it, not decided on.
   Reported (confirm_summary.md/.csv) either way.

Amendments

Amendment 1 (2026-12-05 04:00, before any confirmatory run; seen: the four setups' start
accuracies, no pilot result). The confirmatory `rredcot` arm is `rredcot-earlier`: RREDCoT as
the earlier study ran it, v̂ over the one reference solution, steps covered by position, the
empty part kept (`references: solution, solution_part: remaining, empty_part: keep`). The
lead came from seeds 0-7, run before v̂'s default became every known path matched by content
(2026-12-04 03:25), and seeds 8-16, whose code the history does not pin; a confirmation tests
the treatment that produced the lead. The committed runner listed the current default
(`rredcot`) while the committed rule read `rredcot-earlier`: the two now agree. The main
study's `rredcot` stays the current default.

Amendment 2 (2026-12-05 06:20, before any summary of the pilot's results is committed). The
plan stops after part of stage 1 this round; nothing is chosen.
Seen: the start dev accuracies (long and long-g4 0.679, long-hard 0.716, unique-g4 0.529);
the dev accuracy the runner printed for each finished seed-0 run: long grpo 0.706, oracle
0.667, oracle-sr 0.741; long-g4 grpo 0.710, oracle 0.748, oracle-sr 0.684 (oracle - grpo:
long -0.039 reweight, +0.035 segment-rewards; long-g4 +0.038, -0.026); the training reward
of each step in the runner's log, never averaged (no `online` mean had been computed); the
seconds per step. long-hard grpo seed 0 stopped at step 113 (checkpoint 100 kept, no dev
accuracy); unique-g4 has no run. Stage 1 has 6 of its 24 runs.
Why it stops: compute. A `long` run took 20-24 minutes of one core (training 17-21 min at a
median 6.5-8.6 s a step, the dev evaluation 2-3.5 min), with the machine's 2 cores shared;
the rest of this round's cores belong to the benchmark and the value-cost study, and no GPU
is lent. So no candidate is chosen (the stage-1 rule reads the `online` mean of seeds 0 and
1 of every candidate and is not applied to less), and no stage 2, power amendment, main run
or confirmatory run was made; `train`'s default credit stays `grpo`.
Reported now (pilot_summary.md, labelled interim, nothing decided on it): per candidate with
runs, oracle - grpo and oracle-sr - grpo at seed 0 on `online` and on dev accuracy, each with
a 95% interval from a paired bootstrap within the seed (10,000 resamples, percentile, numpy
seed 0): dev over the 200 dev problems, a problem's 4 samples together, from each run's
correct count per problem, which the stored evaluation did not keep and which is recomputed
by redoing it (`run_study outcomes pilot`: same checkpoint, problems and sampling seed; a
redo whose total differs from the stored one is reported as such and gets no interval);
`online` over the 75 steps 76-150 (every arm of a seed draws the same problems at each step,
so a step pairs its problems, with all their completions, across arms). These intervals
cover problems and samples within one training run, not the variation between training
seeds, which a single seed cannot estimate. long-hard grpo: its training reward over steps
1-10 and 76-113, no difference.
Next round, in order (every command resumes; `OMP_NUM_THREADS=1 nice -n 10 python -m
studies.training_regime.run_study ...`):
  a. `pilot`: resumes long-hard grpo seed 0 at step 100, finishes stage 1 (seed 0: long-hard
     oracle and oracle-sr, unique-g4's three arms; seed 1: all 12 runs), applies the stage-1
     rule, runs stage 2 (seeds 2-7) of the chosen candidate, and of the runner-up if the
     chosen one does not pass. CPU: stage 1's rest (17 runs and 50 steps) about 4.5
     core-hours (a `long`-family run 0.35-0.42 h, a unique-g4 run about 2 min); stage 2, 18
     runs, about 7
     core-hours on a `long` candidate (0.6 on unique-g4), twice that with the runner-up; the
     pilot in all 5-19 core-hours.
  b. `summary pilot`, then `power`: amendment 3 (the power plan and main_plan.json)
     committed before `main`.
  c. `main`: on a `long` candidate about 7-10 core-hours a seed (grpo, oracle, shuffled 0.4 h
     each; rredcot 2-4 h at 10-13x grpo's step; mc 2-3.5 h; cheap about 1 h); at 16 seeds
     110-160 core-hours, 2-3 days of both cores. On unique-g4 about 0.3 core-hours a seed.
  d. `confirm` (independent of the pilot; may run on the second core beside a-c): seeds
     1000-1015 of grpo and rredcot-earlier to the interim look, 1016-1031 if it continues;
     about 2 min a run on `unique`, about 1.1 core-hours to the interim look, 2.2 at most.
  GPU alternative: none of these runs has been timed on a GPU. The models have 0.8M
  parameters, so a step is mostly 384 sequential decoding steps, which a GPU barely speeds;
  RREDCoT's and Monte Carlo's batched scoring gain the most. The lent GPU machines have 16
  cores: there the plan is the same runs split over 14-16 one-thread processes (the earlier
  study's `--worker i --workers k` split, not yet in this runner), rredcot and mc on the GPU,
  after a 10-step timing of grpo, rredcot and mc on `long` (under 10 minutes). The arms of a
  comparison run on the same kind of machine. A task's lent device time (15 minutes) holds
  that timing, not the study.

Amendment 3 (2026-12-05 07:15, before any run it governs: no run of the arms it adds, no
seed-1 run, nothing chosen). Stage 1 of the three `long` setups (`long`, `long-g4`,
`long-hard`) gains a first-error oracle in both forms, `oracle-first` and `oracle-first-sr`
(`oracle.span: first`: -1 on a wrong completion's first wrong line only, every other line 0,
the change in whether the state can still reach the right answer; `oracle` is `span: rest`).
Seen, beyond amendment 2: the seed-0 interim table (oracle - grpo `online` within the seed:
long -0.085 [-0.135, -0.037] reweight, -0.010 [-0.055, +0.035] segment-rewards; long-g4
-0.041 [-0.084, +0.002], -0.031 [-0.068, +0.005]), and a check without training
(docs/training/credit.md, "Why the oracle trails grpo online on long"; 1,400 completions of
50 training problems from the start checkpoint and the seed-0 grpo, oracle and oracle-sr
checkpoints of long and long-g4): the labels are right (the checker's first wrong step is
the first line leaving the reference in all 1,400, the oracle's -1 starts on it in all 634
located wrong ones), but `rest` puts -1 on every line from the first error on, the answer line
included. Two thirds of the start checkpoint's errors on long are where to stop (29 too early,
32 too late, of 94); reweight gives a wrong completion's stopping line 2-15x grpo's penalty
even when it stops at the right count after an earlier slip; the trained seed-0 oracle policy
stops early less (0.5% vs 15.5% of samples, -0.150 [-0.230, -0.085]) and late more (33.5% vs
13.0%, +0.205 [+0.110, +0.305]), errors inside the chain unchanged (+0.03 [-0.04, +0.105]).
So on 20-40-step chains `rest` penalises right continuations and right stops, and the
positive control may be the wrong oracle there. The arm is added after seeing those results;
one seed, 50 problems, the cause inferred from checkpoints, not tested by a training run.
Not on `unique-g4`: its 3-6-step chains leave few lines after a first error, and the cause
seen is a long-chain one; its oracle stays `rest`.
Rule, fixed now (it replaces stage 1's score and extends the choice; the rest of step 1
stands):
- Per long candidate the oracle span is the one whose better form has the larger stage-1 mean
  oracle - grpo `online` over seeds 0 and 1 (`rest` on a tie); the candidate's score is that
  mean, i.e. the largest over its four oracle arms (unique-g4: over its two, as before). The
  span is one of the pilot's decisions and is reported with both spans' stage-1 gains.
  The maximum over four arms favours the long candidates in the ranking; stage 2's gain, on
  seeds 2-7, which chose nothing, is free of that selection.
- Stage 2 of a candidate runs grpo and its span's two forms (three arms, as before); the form
  is chosen by the stage-2 gain, the bar (+0.03, interval above 0) judged on it, as before.
- The main study's `oracle` is the chosen setup's span in the chosen form, and its `shuffled`
  permutes that oracle's rewards (`oracle-first`/`shuffled-first` and their `-sr` forms when
  the span is `first`); the power amendment's delta and sigma_U are that arm's, and the main
  plan names those arms. The share of the oracle's gain is measured against that oracle.
Cost: 12 more stage-1 runs (2 arms x 3 setups x 2 seeds, 0.35-0.42 core-hours each), 4-5
core-hours; the pilot in all 9-24 core-hours. The power plan and main_plan.json, which
amendment 2 called amendment 3, come in amendment 4. Seed 0's finished runs are kept.

Amendment 4 (2026-12-05 13:10, before any main run; seen: the pilot's results, complete
(pilot_summary.md, results commit f9c954a), and 6-step timings of grpo, rredcot and mc on
long-g4 at seed 99, outside the study and not reused). The power plan and main_plan.json.
Pilot, by the rule: long-g4, span `first`, form reweight. Stage 2 (seeds 2-7) oracle-first -
grpo `online` +0.044 [+0.003, +0.085], segment rewards +0.036 [-0.009, +0.080]: the bar is
met, long-hard gets no stage 2.
Power, step 2 as written: delta = 0.0219 (half of +0.0437); SD of oracle-first - grpo `online`
over seeds 0-7 0.0554, sigma_U 0.0996 (7 df); a fixed design needs 165 seeds (53 at the point
SD); the default rule's simulated power at 165 seeds 0.69.
Cost (one thread, the other core busy; median seconds a step): grpo 2.49, rredcot 7.26 (2.9x),
mc 8.75 (3.5x, 4 rollouts at <= 8 boundaries: setups.MC_OPTIONS, kept). A seed of the five
first arms is about 1.2 core-hours (grpo, oracle-first, shuffled-first 0.15 h each with the
test evaluation, rredcot 0.35, mc 0.4); 165 seeds about 200 core-hours, four days of both of
this machine's cores. It does not fit, so step 2's group-sequential plan:
- Looks after every 8 seeds, at most 208 (seeds 100-307): the fewest multiple of 8 whose
  simulated power against delta at sigma_U, as run (paired t-tests on the z scale, futility
  stops taken), is at least 0.8 (0.805). Efficacy: Lan-DeMets O'Brien-Fleming alpha spending,
  two-sided 0.05 per primary comparison (z bound 12 at look 1, 3.48 at look 10, 2.14 at look
  26). Futility, non-binding: beta spending of the same type (beta 0.2) against delta at
  sigma_U (z bound -5.81 at look 1, 0.06 at look 10, meeting the efficacy bound at 26); the
  efficacy bounds ignore it, so the type I error stays at most 0.05 (0.02 with the stops).
  Expected seeds: 131 under delta, 85 under no effect. Bounds in main_plan.json
  (`sequential.design`; its tests reproduce gsDesign's published bounds).
- Primary comparisons, `online`, each at its own 0.05 (each answers its own question):
  oracle-first - grpo (the positive control on new seeds), rredcot - grpo, mc - grpo,
  cheap - grpo. Held-out test accuracy, differences against shuffled-first and the oracle,
  and the share of the oracle's gain are reported beside them (t-intervals at each look,
  labelled as not adjusted for the looks).
- Which arms run how far (`main_plan.progress`): rredcot and mc run seed by seed with grpo,
  oracle-first and shuffled-first until their comparison stops (efficacy, harm, futility) or
  reads look 26; the oracle's comparison gates them: its futility or harm stop stops every
  source (a source cannot show a gain where perfect credit shows none here). cheap runs after
  both have stopped, through the same looks, as step 3 defines it then; grpo, oracle-first and
  shuffled-first run at every seed a live source needs.
- `train`'s default, step 3's rule at the looks: a source qualifies when its comparison stops
  for efficacy and, at that look, its difference from shuffled-first is above the same z bound;
  of those the cheapest (within-run ratio); else grpo stays.
- Every look's decisions go to main_looks.json, committed with the look's results.
CPU: look 1 (8 seeds, five arms) about 10 core-hours; expected under delta about 155. On this
machine the plan runs across rounds (every command resumes); a lent 16-core machine would run
14-16 one-thread runs at once. The main runs use the training code of the commit that adds
this amendment; a change to it during the study would be an amendment.

Amendment 5 (2026-12-06 00:54, before any run it governs; seen: look 1, as committed). The
machine the study ran on was replaced between rounds, and `runs/` (checkpoints: not tracked)
with it. Look 1's 40 runs survive as rows of the tracked main_runs.csv; the 22 finished runs of
look 2's seeds (no look had read them) and the two in flight do not. So:
- A run whose folder is absent but whose full-length row `<phase>_runs.csv` holds is read from
  that row (`summarize.runs_table`) and not trained again (`run_plan`); look 2's lost runs are
  trained again on their seeds, with amendment 4's training code (commit 422bfdf, unchanged)
  and the checkpoint the package ships.
- At each stop the main_runs.csv of every finished run is committed (the tables and the looks
  still read a look's seeds only), so finished work survives the next machine.
- Before the workers resume on a new machine: `reproduce main --arm grpo --seed 100` trains
  that look-1 run again and compares its row with the recorded one (`main_reproduce.json`).
  Training here is seeded and single-threaded, so the expectation is equality; if it differs
  the study goes on (a seed's arms all run on one machine and every comparison is paired
  within the seed) and the docs say by how much.

Amendment 6 (2026-12-06 02:00, before look 2; seen: look 1, and amendment 5's check). Reporting
only; no decision, bound or run changes. Each look also reports, per primary comparison, the
repeated 95% confidence interval (Jennison and Turnbull): mean +- q se, q the t quantile
(n - 1 df) of the look's two-sided efficacy boundary's nominal tail, clipped to [-1, +1];
together over all looks they cover the true difference with 0.95 whenever the study stops, so
they are the intervals to quote beside the decisions (at look 1 the bound z 12 makes them
[-1, +1]: eight seeds can say nothing under this plan, which spends almost no alpha there).
The unadjusted t-intervals stay in the tables, labelled so.

Amendment 7 (2026-12-07 00:45; seen: looks 1-7 and the rows of look 8's ten runs, as
committed). The machine was replaced again, and `runs/` with it: shuffled-first 158 (finished,
its row not committed) and the two runs in flight are lost. One run it governs finished before
it: shuffled-first 158 again, trained here by a worker started beside the check (00:30-00:38);
its result was not read before this amendment, and its machine.json was written after it (the
runner that trained it came before the file).
Amendment 5's check differs here (AMD EPYC, torch's AVX2 kernels): grpo 100 trained again gives
online 0.67083 against 0.69833, first steps 0.5875 (equal), held-out 0.7275 against 0.7225
(`main_reproduce.json`, now every machine's check in a list). As amendment 5 set, the study
goes on: the seed fixes the problem order and the sampling stream on every machine; the last
rounding bit of the kernels moves a run as another draw of the same seed would (0.027, under
one SD of grpo's online reward across seeds, 0.039). Two things amendment 5 assumed fail:
- Seed 158's grpo and oracle-first rows were recorded on the previous machine; its
  shuffled-first and mc train here. The rows stay (amendment 5's first rule); seed 158 is the
  one seed whose arms span machines. Arms share little within a seed (the correlation of two
  arms' online reward over seeds 100-158 is 0.27 at most), so a pair across machines loses
  little of the pairing.
- The cost columns' medians mix machines (a step here takes about 1.5 times as long); the
  within-run ratio does not.
So, reporting only (no decision, bound or run changes): each run records the machine of each
start or resume (`machine.json`: CPU, torch's CPU kernels, torch), and `summary` writes every
run's to the tracked main_machines.csv (the runs before this amendment: `machines.BEFORE`, the
machines whose check reproduced the recorded run). From look 8 the descriptions outside the
plan split each primary comparison into the seeds whose two arms both trained before this
amendment and the others (`machines.machine_split`). Each new machine runs the check again
and appends it; the study goes on whatever it gives, and the docs say by how much.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

from studies.training.run_study import finished
from studies.training_regime.locks import claim, release
from studies.training_regime.setups import (
    SETUPS,
    Setup,
    evaluated,
    problem_files,
    run_config,
    run_dir,
)

HERE = Path(__file__).resolve().parent
STEPS = 150

PILOT_SETUPS = ("long", "long-g4", "long-hard", "unique-g4")
PILOT_ARMS = ("grpo", "oracle", "oracle-sr")
# Amendment 3: the first-error oracle in both forms, in stage 1 of the long setups.
FIRST_ERROR_SETUPS, FIRST_ERROR_ARMS = ("long", "long-g4", "long-hard"), ("oracle-first",
                                                                         "oracle-first-sr")
STAGE1_SEEDS, STAGE2_SEEDS = (0, 1), tuple(range(2, 8))
CONFIRM_SETUP, CONFIRM_ARMS = "unique", ("grpo", "rredcot-earlier")
CONFIRM_SEEDS = tuple(range(1000, 1032))
CONFIRM_INTERIM = 16  # seeds at the interim look
LOOK_EVERY = 8  # amendment 4: the main study's looks


def run_one(out: Path, phase: str, setup: Setup, arm: str, seed: int, steps: int,
            split: str, tag: str) -> dict:
    """Train one run (or resume it), then its held-out accuracy on `split`."""
    from cotcredit.training.run import train
    from studies.training.run_study import heldout
    from studies.training_regime.machines import note_machine

    run = run_dir(out, phase, setup.name, arm, seed)
    if not finished(run, steps):
        config = run_config(out, phase, setup, arm, seed, steps)
        resume = any(run.glob("checkpoint-*/trainer_state.json"))
        note_machine(run, resume)  # amendment 7
        print(f"{tag}: {'resuming' if resume else 'starting'}", flush=True)
        start = time.perf_counter()
        train(config, resume=resume, overwrite=not resume)
        print(f"{tag}: trained in {time.perf_counter() - start:.0f} s", flush=True)
        gc.collect()
    result = heldout(run, setup.regime, split, seed, out,
                     problems_file=problem_files(setup, out / "data")[split],
                     max_new_tokens=setup.max_tokens)
    print(f"{tag}: {split} accuracy {result['accuracy']:.3f}", flush=True)
    return result


def start_accuracy(out: Path, setup: Setup) -> dict:
    """The setup's checkpoint before training on its dev problems (cached in start.json)."""
    from cotcredit.bench.regimes import checkpoint
    from studies.training.run_study import sampled_accuracy

    path = out / "runs" / "start" / f"{setup.name}.json"
    if path.is_file():
        return json.loads(path.read_text())
    result = sampled_accuracy(checkpoint(setup.regime), problem_files(setup, out / "data")["dev"],
                              0, setup.max_tokens)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def run_plan(out: Path, phase: str, todo: list[tuple[str, int, str]], steps: int,
             split: str, wait: float = 60.0, ahead: list[tuple[str, int, str]] = ()) -> None:
    """Run (setup, seed, arm) in order, skipping what is finished. Several processes may run
    the same plan at once (one thread each): each takes the next run no other live process
    holds (`claim`), and returns only when every run of the plan is finished. `ahead`: runs a
    later plan needs whatever this one decides; while every run left is held by others, this
    process trains the first of them that is neither finished nor held, instead of waiting."""
    import torch

    from studies.training_regime.summarize import recorded_runs

    torch.set_num_threads(1)
    recorded = recorded_runs(out, phase, steps)
    recorded = set(zip(recorded.regime, recorded.arm, recorded.seed, strict=True))

    def take(i: int, total: int, name: str, seed: int, arm: str, label: str) -> bool:
        """Run or read one run; False when another live process holds it."""
        run = run_dir(out, phase, name, arm, seed)
        tag = f"[{label} {i + 1}/{total}] {name} {arm} seed {seed}"
        if not run.is_dir() and (name, arm, seed) in recorded:  # amendment 5
            print(f"{tag}: recorded in {phase}_runs.csv (its folder is not here)", flush=True)
        elif evaluated(run, split):
            run_one(out, phase, SETUPS[name], arm, seed, steps, split, tag)
        elif claim(run):
            try:
                run_one(out, phase, SETUPS[name], arm, seed, steps, split, tag)
            finally:
                release(run)
        else:
            return False
        return True

    waiting = list(enumerate(todo))
    while waiting:
        held = [(i, r) for i, r in waiting if not take(i, len(todo), *r, phase)]
        if held and len(held) == len(waiting):  # else a run taken meanwhile may have freed them
            spare = [(i, (name, seed, arm)) for i, (name, seed, arm) in enumerate(ahead)
                     if (name, arm, seed) not in recorded
                     and not evaluated(run_dir(out, phase, name, arm, seed), split)]
            if not any(take(i, len(ahead), *r, f"{phase} ahead") for i, r in spare):
                print(f"[{phase}] {len(held)} runs held by other processes: waiting",
                      flush=True)
                time.sleep(wait)
        waiting = held


def stage1_arms(setup: str) -> tuple[str, ...]:
    """The pilot's stage-1 arms of `setup` (amendment 3 adds the first-error oracle on the long
    setups)."""
    return PILOT_ARMS + (FIRST_ERROR_ARMS if setup in FIRST_ERROR_SETUPS else ())


def stage2_arms(span: str) -> tuple[str, ...]:
    """grpo and the two forms of the oracle span stage 1 chose for the setup."""
    from studies.training_regime.summarize import SPANS

    return ("grpo", *SPANS[span].values())


def pilot(out: Path, steps: int) -> None:
    """Stage 1 on every candidate, the choice, then stage 2 on the chosen one (and on the
    runner-up when the chosen one does not pass), each in its stage-1 oracle span."""
    from studies.training_regime.summarize import pilot_choice, runs_table

    for name in PILOT_SETUPS:
        print(f"start accuracy {name}: {start_accuracy(out, SETUPS[name])['accuracy']:.3f}")
    stage1 = [(s, seed, a) for seed in STAGE1_SEEDS for s in PILOT_SETUPS
              for a in stage1_arms(s)]
    run_plan(out, "pilot", stage1, steps, "dev")
    choice = pilot_choice(runs_table(out, "pilot", steps))
    print(json.dumps(choice, indent=1))
    for name in choice["stage2_order"]:
        arms = stage2_arms(choice["span"][name])
        run_plan(out, "pilot", [(name, seed, a) for seed in STAGE2_SEEDS for a in arms],
                 steps, "dev")
        choice = pilot_choice(runs_table(out, "pilot", steps))
        if choice["passed"]:
            break
    (out / "pilot_choice.json").write_text(json.dumps(choice, indent=1) + "\n")


def power(out: Path, steps: int, write: bool = False) -> dict:
    """Protocol step 2 from the pilot's runs: the seeds for half the oracle's gain at the
    pilot SD's upper bound, the default rule's power there (printed, not decided on), and the
    group-sequential plan of amendment 4 (looks every `LOOK_EVERY` seeds); `write`: the plan
    to main_plan.json."""
    from studies.training_regime.main_plan import make_plan
    from studies.training_regime.sequential import smallest_design
    from studies.training_regime.summarize import pilot_choice, power_plan, rule_power, runs_table

    table = runs_table(out, "pilot", steps)
    choice = pilot_choice(table)
    span = choice["span"][choice["chosen"]]
    plan = power_plan(table, choice["chosen"], choice["form"], span=span)
    for n in sorted({plan["seeds"], 8, 12, 16, 24}):
        plan[f"rule_power_{n}"] = rule_power(n, plan["delta"], plan["sd_upper"])
    design = smallest_design(plan["delta"], plan["sd_upper"], LOOK_EVERY)
    plan["sequential"] = {k: design[k] for k in ("power", "expected_seeds",
                                                 "expected_seeds_null", "alpha")}
    plan["sequential"]["max_seeds"] = design["looks"][-1]
    print(json.dumps(plan, indent=1))
    if write:
        main = make_plan(choice["chosen"], span, choice["form"], design, power=plan)
        (out / "main_plan.json").write_text(json.dumps(main, indent=1) + "\n")
    return plan


def main_study(out: Path, steps: int) -> None:
    """The main runs as main_plan.json (the power amendment's) lists them, look by look: the
    arms of the live comparisons seed by seed up to the next look, then that look's decisions
    (main_looks.json), until every comparison has stopped or read its last look. A process
    with nothing left to take before a look trains the next look's controls (`runs_ahead`)."""
    from studies.training_regime.main_plan import runs_ahead, write_progress
    from studies.training_regime.pinned import differs, package_source
    from studies.training_regime.summarize import runs_table

    if reason := differs(package_source()):
        raise SystemExit(f"main: not amendment 4's training code: {reason}")
    plan = json.loads((out / "main_plan.json").read_text())
    before = None
    while True:
        state = write_progress(out, runs_table(out, "main", steps), plan)
        print(json.dumps(state["state"]), flush=True)
        if state["done"]:
            return
        todo = [(plan["setup"], s, a) for s in state["next_seeds"] for a in state["next_arms"]]
        if todo == before:
            raise RuntimeError(f"main: runs finished but the look cannot be read: {todo}")
        run_plan(out, "main", todo, steps, "test",
                 ahead=[(plan["setup"], s, a) for s, a in runs_ahead(plan, state)])
        before = todo


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("pilot", "power", "main", "confirm", "summary",
                                     "outcomes", "reproduce"))
    ap.add_argument("phase", nargs="?", choices=("pilot", "main", "confirm"))
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--write", action="store_true", help="power: write main_plan.json")
    ap.add_argument("--arm", default="grpo", help="reproduce: the run's arm")
    ap.add_argument("--seed", type=int, default=100, help="reproduce: the run's seed")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    if args.what == "summary":
        from studies.training_regime.summarize import summarize

        summarize(out, args.phase or "pilot", steps=args.steps)
    elif args.what == "reproduce":
        from studies.training_regime.reproduce import reproduce

        reproduce(out, args.phase or "main", args.arm, args.seed, args.steps)
    elif args.what == "outcomes":
        from studies.training_regime.outcomes import problem_outcomes

        problem_outcomes(out, args.phase or "pilot")
    elif args.what == "pilot":
        pilot(out, args.steps)
    elif args.what == "power":
        power(out, args.steps, args.write)
    elif args.what == "main":
        main_study(out, args.steps)
    else:
        from studies.training_regime.summarize import confirm_decision, runs_table

        todo = [(CONFIRM_SETUP, s, a) for s in CONFIRM_SEEDS[:CONFIRM_INTERIM]
                for a in CONFIRM_ARMS]
        run_plan(out, "confirm", todo, args.steps, "test")
        decision = confirm_decision(runs_table(out, "confirm", args.steps))
        if decision["continue"]:
            run_plan(out, "confirm", [(CONFIRM_SETUP, s, a) for s in CONFIRM_SEEDS
                                      for a in CONFIRM_ARMS], args.steps, "test")


if __name__ == "__main__":
    main()
