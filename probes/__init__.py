"""probes: framework-agnostic instrumentation of RL post-training, one module per concern.

Every probe turns what a trainer does into ``rlobs`` events (into the run record, and from there into
the Prometheus metrics of ``rlobs.catalogue`` and OpenTelemetry spans). Probes take plain numbers,
numpy arrays or torch tensors; they send to ``rlobs.get_recorder()`` (a no-op until ``rlobs.init``)
or to a recorder passed as their first argument. Telemetry never raises into training except for
configuration mistakes (unknown names), which raise ``ValueError`` listing the valid values.

Quick start: a plain PyTorch loop with probes (the lines marked ``# +`` are all it takes; a test runs
this exact example):

    import torch, rlobs, probes                                                  # + rlobs, probes

    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = rlobs.init("runs/demo", component="trainer")                           # +
    grads, advs = probes.GradNormProbe(max_norm=1.0), probes.AdvantageProbe()   # +
    for step in range(5):
        rec.set_step(step)                                                       # +
        with probes.phase("train"):                                              # +
            x = torch.randn(16, 8)
            rewards = (x.sum(1) > 0).float().view(4, 4)        # 4 groups (prompts) x 4 samples
            advs.observe(rewards)                                                # +
            loss = ((model(x).squeeze(1) - rewards.view(-1)) ** 2).mean()
            loss.backward()
            grads.observe(parameters=model.parameters(), loss=loss.item(), lr=0.1)  # +
            opt.step(); opt.zero_grad()
    rlobs.shutdown()                                                             # +

Modules:
    staleness    VersionTag / tag_dispatch, StalenessProbe (admit, drop, consume), importance_stats,
                 record_rollout, record_queue
    advantage    AdvantageProbe, advantage_health, grpo_advantages, gather_denominators
    gradnorm     GradNormProbe, SpikeDetector, global_grad_norm, group_grad_norms
    weight_sync  WeightSyncProbe (sync -> dump / staging / transfer / load / cache_reset), StagingBuffer
    fingerprint  tensor_fingerprint, fingerprints, combined_fingerprint, compare_fingerprints
    grader       GraderProbe (call, acall, track, wrap, waiting, watchdog)
    throughput   ThroughputMeter, predict_staleness
    parity       ParityProbe, config_hashes, logprob_parity, parity_status
    ledger       SampleLedger (exactly-once transitions, JSON save/load)
    liveness     Liveness, phase, beat
    goodput      GoodputAccount, cost_per_effective_token
"""

from probes.advantage import AdvantageHealth, AdvantageProbe, advantage_health, gather_denominators, grpo_advantages
from probes.goodput import CATEGORIES as GOODPUT_CATEGORIES
from probes.goodput import GoodputAccount, cost_per_effective_token
from probes.grader import GraderProbe
from probes.gradnorm import GradNormProbe, GradNormResult, SpikeDetector, global_grad_norm, group_grad_norms
from probes.ledger import DROP_REASONS, LedgerReport, SampleLedger
from probes.liveness import Liveness, beat, phase
from probes.parity import (ParityProbe, ParityStats, chat_template_hash, compare_hashes, config_hashes,
                           logprob_parity, parity_status, sampling_hash, stable_hash, tokenizer_hash)
from probes.staleness import (BatchStaleness, ISStats, StalenessProbe, VersionTag, importance_stats, record_queue,
                              record_rollout, staleness_of, tag_dispatch)
from probes.throughput import ThroughputMeter, ThroughputWindow, predict_staleness
from probes.fingerprint import combined_fingerprint, compare_fingerprints, fingerprints, tensor_fingerprint
from probes.weight_sync import BOUNDARIES, StagingBuffer, SyncSession, WeightSyncProbe

__all__ = [
    # staleness
    "VersionTag", "tag_dispatch", "staleness_of", "StalenessProbe", "BatchStaleness", "ISStats", "importance_stats",
    "record_queue", "record_rollout",
    # advantage
    "AdvantageProbe", "AdvantageHealth", "advantage_health", "grpo_advantages", "gather_denominators",
    # grad norm
    "GradNormProbe", "GradNormResult", "SpikeDetector", "global_grad_norm", "group_grad_norms",
    # weight sync
    "WeightSyncProbe", "SyncSession", "StagingBuffer", "BOUNDARIES", "tensor_fingerprint", "fingerprints",
    "combined_fingerprint", "compare_fingerprints",
    # grader
    "GraderProbe",
    # throughput
    "ThroughputMeter", "ThroughputWindow", "predict_staleness",
    # parity
    "ParityProbe", "ParityStats", "config_hashes", "tokenizer_hash", "chat_template_hash", "sampling_hash",
    "stable_hash", "compare_hashes", "logprob_parity", "parity_status",
    # ledger, liveness, goodput
    "SampleLedger", "LedgerReport", "DROP_REASONS", "Liveness", "phase", "beat",
    "GoodputAccount", "GOODPUT_CATEGORIES", "cost_per_effective_token",
]
