"""rlobs observe: the generated Prometheus config, and a real Prometheus started and stopped cleanly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from rlobs.dashboards.observe import LocalPrometheus, PrometheusError, prometheus_config

from .conftest import interrupt_and_read, need


def test_config_scrapes_every_run_through_file_sd_and_loads_the_rules(tmp_path):
    text = prometheus_config([tmp_path / "a", tmp_path / "b"], tmp_path / "rules.yaml", "2s")
    cfg = yaml.safe_load(text)
    assert cfg["global"] == {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "2s"}
    assert cfg["rule_files"] == [str((tmp_path / "rules.yaml").resolve())]
    (job,) = cfg["scrape_configs"]
    assert job["file_sd_configs"][0]["files"] == [str(tmp_path.resolve() / d / "prometheus_sd" / "*.json")
                                                  for d in ("a", "b")]
    config = tmp_path / "prometheus.yml"
    (tmp_path / "rules.yaml").write_text("groups: []\n")
    config.write_text(text)
    out = subprocess.run([need("promtool"), "check", "config", str(config)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_local_prometheus_binds_localhost_loads_rules_and_cleans_up(tmp_path):
    need("prometheus")
    with LocalPrometheus([tmp_path / "run"], port=0) as prom:
        assert prom.url.startswith("http://127.0.0.1:")
        workdir = prom.workdir
        assert workdir is not None and (workdir / "tsdb").is_dir()
        groups = prom.api("rules")["groups"]
        from rlobs.dashboards.alerts import RULES

        assert [r["name"] for r in groups[0]["rules"]] == [r.name for r in RULES]
        assert prom.query("vector(1)")[0]["value"][1] == "1"
        with pytest.raises(PrometheusError, match="bad_data"):
            prom.query("sum(")
    assert prom.proc is None and not workdir.exists()


def test_local_prometheus_loads_the_precursor_alerts_built_for_the_step_time(tmp_path):
    """`rlobs observe --step-seconds 300`: the Prometheus it starts evaluates the precursor alerts over 25 minutes
    (5 steps of 5 minutes), with `for` 150 s; the other alerts as committed."""
    need("prometheus")
    with LocalPrometheus([tmp_path / "run"], port=0, step_seconds=300) as prom:
        rules = {r["name"]: r for r in prom.api("rules")["groups"][0]["rules"]}
    assert rules["RlobsPrecursorOversizedUpdates"]["duration"] == 150
    assert "[25m]" in rules["RlobsPrecursorOversizedUpdates"]["query"]
    assert "[10m]" not in rules["RlobsPrecursorOversizedUpdates"]["query"]
    assert rules["RlobsProcessDown"]["duration"] == 30


def test_missing_binary_is_a_clear_error(tmp_path):
    with pytest.raises(PrometheusError, match="not found"):
        LocalPrometheus([tmp_path], port=0, binary=str(tmp_path / "no-prometheus")).start()


def test_cli_observe_refuses_a_missing_run_directory(tmp_path):
    from rlobs import exitcodes

    out = subprocess.run([sys.executable, "-m", "rlobs", "observe", str(tmp_path / "no-such-run"), "--port", "0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == exitcodes.INPUT and "no such run directory" in out.stderr


@pytest.mark.parametrize("doctor", [[], ["--no-doctor"]], ids=["doctor-on-by-default", "no-doctor"])
def test_cli_observe_prints_the_url_and_stops_cleanly_on_ctrl_c(tmp_path, doctor):
    need("prometheus")
    (tmp_path / "run").mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "rlobs", "observe", str(tmp_path / "run"), "--port", "0", *doctor],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    try:
        line = proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert match, line
        with urllib.request.urlopen(f"{match.group(0)}/-/ready", timeout=5) as resp:
            assert resp.status == 200
        rest = interrupt_and_read(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, rest
    assert "Prometheus stopped" in rest
    # the doctor's watcher (RlobsDoctorPrecursor) is on unless --no-doctor
    assert ("the doctor judges each run every 10 s" in rest) == (not doctor), rest
    time.sleep(0.2)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{match.group(0)}/-/ready", timeout=2)
