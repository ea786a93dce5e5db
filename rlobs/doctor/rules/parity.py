"""Train/serve parity rules: log-prob drift between generator and trainer, and config (hash) mismatch."""

from __future__ import annotations

from typing import Mapping

from rlobs.doctor.context import RunContext, json_list, runs_of
from rlobs.doctor.model import Evidence, Finding, Insufficient, RuleResult, Severity, rule


@rule("parity-drift", concern="parity", title="Generator and trainer log-probs disagree",
      needs=("parity",), thresholds={"warn": 0.005, "critical": 0.01, "min_steps": 1})
def drift(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Mean |logp_train - logp_gen| per step: > ``critical`` is a problem, > ``warn`` for ``min_steps``
    steps a warning (field guidance: < 0.005 healthy, > 0.01 a problem). A jump on the first batch after a
    sync points at weight sync or a cache not reset; a slow rise at staleness or precision."""
    if not ctx.count("parity"):
        return Insufficient("no parity events")
    rows = [(int(s), float(v), bool(a)) for s, v, a in ctx.rows(
        "SELECT step, max(mean_abs_dlogp) v, bool_or(coalesce(first_after_sync, false)) FROM parity "
        f"WHERE step IS NOT NULL AND isfinite(mean_abs_dlogp){ctx.step_filter()} GROUP BY step ORDER BY step")]
    if not rows:
        dprob = ctx.scalar("SELECT count(mean_abs_dprob) FROM parity")
        if dprob:
            return Insufficient(f"parity has only probability differences (mean_abs_dprob, {dprob} steps, e.g. "
                                "verl's rollout_probs_diff_mean); the field thresholds are for log-prob differences")
        return Insufficient("parity events carry no finite mean_abs_dlogp")
    crit = [s for s, v, _ in rows if v > th["critical"]]
    warn = runs_of([s for s, v, _ in rows if v > th["warn"]], int(th["min_steps"]))
    if not crit and not warn:
        return []
    # the finding spans the problem from its onset: the warning-level run that leads into the critical steps
    bad_steps = sorted(set(crit) | {s for a, b in warn for s in range(a, b + 1)})
    first, last = min(bad_steps), max(bad_steps)
    worst = max((r for r in rows if first <= r[0] <= last), key=lambda r: r[1])
    after_sync = [r for r in rows if r[0] in set(bad_steps) and r[2]]
    pattern = ("it jumps on the first batch after syncs: suspect the weight sync (fingerprints) or a prefix "
               "cache that was not reset" if after_sync and len(after_sync) * 2 >= len(bad_steps) else
               "it persists across batches: suspect mismatched tokenizer/template/sampling settings, "
               "precision, or staleness")
    return [Finding(
        rule="parity-drift", severity=Severity.CRITICAL if crit else Severity.WARNING,
        title=f"mean |dlogp| reached {worst[1]:.3g} at step {worst[0]} (healthy < {th['warn']})",
        first_step=first, last_step=last,
        evidence=[Evidence("parity.mean_abs_dlogp", round(worst[1], 6), th["critical"] if crit else th["warn"],
                           (first, last), f"{len(after_sync)} of the bad steps are first batches after a sync")],
        root_cause=f"the generator samples from a different distribution than the trainer scores: {pattern}",
        confidence=0.5,
        remediation=["rlobs doctor RUN --rule weight-sync-fingerprint-mismatch --rule weight-sync-cache-not-reset",
                     "rlobs doctor RUN --rule parity-config-mismatch",
                     "use the same dtype for generation and training log-probs, or correct with TIS"],
    )]


@rule("parity-config-mismatch", concern="parity",
      title="Tokenizer, chat template or sampling parameters differ between generator and trainer",
      needs=("parity", "manifest"), causes=("parity-drift",))
def config_mismatch(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Hashes of tokenizer / chat template / sampling parameters differ across the processes' manifests,
    or the parity probe reported hashes_match = false."""
    if not ctx.count("manifest") and not ctx.count("parity"):
        return Insufficient("no manifest or parity events")
    diffs = []
    for col, label in (("tokenizer_hash", "tokenizer"), ("chat_template_hash", "chat template"),
                       ("sampling_hash", "sampling parameters")):
        vals = ctx.rows(f"SELECT component, {col} FROM manifest WHERE {col} IS NOT NULL ORDER BY ts_ns")
        if len({v for _, v in vals}) > 1:
            diffs.append(f"{label}: " + ", ".join(f"{c}={v[:10]}" for c, v in vals))
    rows = ctx.rows("SELECT step, mismatched_hashes FROM parity WHERE hashes_match = false"
                    f"{ctx.step_filter()} ORDER BY step") if ctx.count("parity") else []
    for _, mism in rows[:1]:
        names = json_list(mism)
        diffs.append("parity probe: " + (", ".join(map(str, names)) if names else "hashes differ"))
    if not diffs:
        if not ctx.rows("SELECT 1 FROM manifest WHERE sampling_hash IS NOT NULL OR tokenizer_hash IS NOT NULL LIMIT 1") \
                and not ctx.rows("SELECT 1 FROM parity WHERE hashes_match IS NOT NULL LIMIT 1"):
            return Insufficient("no process recorded tokenizer / template / sampling hashes")
        return []
    steps = [int(s) for s, _ in rows if s is not None]
    return [Finding(
        rule="parity-config-mismatch", severity=Severity.CRITICAL,
        title="generator and trainer run with different " + ", ".join(d.split(":")[0] for d in diffs),
        first_step=min(steps) if steps else 0, last_step=max(steps) if steps else None,
        evidence=[Evidence("config hashes", d[:200], "equal on every process") for d in diffs],
        root_cause="the two sides were configured separately and drifted (e.g. temperature/top_p applied by the "
                   "generator but not when the trainer recomputes log-probs, or a different chat template)",
        confidence=0.9,
        remediation=["derive generator and trainer settings from one config object",
                     "assert hash equality at startup (the parity probe's config_hashes)"],
    )]
