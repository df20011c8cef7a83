"""The benchmark scripts still run: each at its smallest setting, no peer library, no timing asserted.

The figures in docs/BENCHMARKS.md come from these scripts; a script broken by a later change would
only be found the next time someone measured. Each runs here in a subprocess, as its docstring
says to run it, and must exit 0 and print its table with a row for what was asked.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

CASES = [
    # script, arguments, lines the output must contain
    ("bench_losses.py", ["--rounds", "1", "--repeats", "1", "--no-peer", "--losses",
                         "list_mle,soft_ndcg,soft_ndcg@3", "--sizes", "4x8"],
     ["| loss | implementation | batch x n |", "| list_mle | ours | 4 x 8 |",
      "| soft_ndcg | ours | 4 x 8 |", "| soft_ndcg@3 | ours | 4 x 8 |"]),
    ("bench_softrank.py", ["--sizes", "4x8", "--rounds", "1", "--reps", "1", "--no-peer",
                           "--cases", "soft_ndcg exact", "neural_ndcg (this project)"],
     ["| case | 4x8 |", "| soft_ndcg exact |", "| neural_ndcg (this project) |"]),
    ("bench_training.py", ["--rounds", "1", "--reps", "1", "--batch", "4", "--list-size", "8",
                           "--features", "8", "--losses", "list_mle", "--skip-mq2008"],
     ["| model | features | loss | step (ms) | queries / s |", "| context_aware (paper) | 8 | list_mle |"]),
    ("bench_training.py", ["--rounds", "1", "--reps", "1", "--batch", "2", "--list-size", "6",
                           "--features", "4", "--losses",
                           "neural_ndcg,neural_ndcg-torch,soft_ndcg,soft_ndcg-blocked", "--skip-mq2008"],
     ["| mlp [64, 32] | 4 | neural_ndcg |", "| mlp [64, 32] | 4 | neural_ndcg-torch |",
      "| mlp [64, 32] | 4 | soft_ndcg-blocked |"]),
    ("bench_boosting.py", ["--reps", "1", "--rounds-per-fit", "2", "--calls", "1", "--cases",
                           "list_mle,list_net-diag-autograd"],
     ["| objective | hessian | gradients (ms) |", "| lightgbm lambdarank (built in) |",
      "| list_mle | constant |", "| list_net-diag-autograd | diagonal |"]),
    ("bench_boosting.py", ["--data", "synthetic", "--queries", "20", "--docs", "10", "--features", "4",
                           "--reps", "2", "--rounds-per-fit", "1", "--calls", "1", "--cases",
                           "lambda_rank,neural_ndcg-torch,soft_ndcg,soft_ndcg-torch"],
     ["synthetic (20 queries,", "| lambda_rank | constant |", "| neural_ndcg-torch | constant |",
      "| soft_ndcg | constant |", "| soft_ndcg-torch | constant |"]),
    ("bench_versions.py", ["--old", str(REPO), "--size", "4x8", "--rounds", "1", "--calls", "1"],
     ["| round | old min | old median | this min | this median |", "| 1 |"]),
    ("bench_diag_hessian.py", ["--reps", "1", "--budgets", "1,2"], ["| list_mle |"]),
    ("bench_io.py", ["--rounds", "1", "--files", "rank.test"],
     ["| file | MB | sklearn ms |", "| LightGBM-lambdarank/rank.test.gz |"]),
    ("bench_io.py", ["--rounds", "1", "--files", "synthetic", "--synthetic-docs", "600"],
     ["| synthetic 600 docs x 136 |"]),
    # every step in its own process (the training epoch left out: a minute on a loaded machine)
    pytest.param("bench_scale.py", ["--docs", "2400", "--valid-docs", "600", "--rounds", "1", "--skip-train"],
                 ["| first read |", "| re-open |", "parse (cache=False), this checkout"],
                 marks=pytest.mark.slow),
    # "4X8": the sizes' upper-case form, as every other script reads them
    ("bench_neuralsort_precision.py", ["--rounds", "1", "--sizes", "4X8"], ["| neural_ndcg | 4 x 8 |"]),
    ("sinkhorn_convergence.py", ["--sizes", "8", "--iterations", "1,30"],
     ["| n | max_iter | marginal error | loss |", "| 8 | 30 |"]),
    # the row, not its values: whether the MLP is bit-identical at 1 and 2 threads depends on the CPU
    # (0 and 0 on the AMD EPYC development machine, 1.8e-8 and 9.1e-7 on an Intel Xeon with AVX-512)
    ("thread_invariance.py", ["--threads", "2"],
     ["| operation | output | gradients |", "| MLP 128-64, dropout 0.1, 32 lists of 60 |"]),
    ("bench_serving.py", ["--models", "linear", "--formats", "torchscript", "--reps", "2", "--rounds", "1",
                          "--cold-runs", "1"],
     ["| model | path | median ms (rounds) |", "| linear | python api |", "| linear | torchscript |",
      "| linear | python api | "]),
    ("profile_loss.py", ["--loss", "neural_ndcg", "--options", "temperature=0.5,k=3", "--batch", "4",
                         "--n", "8", "--calls", "1", "--rows", "5"],
     ["Self CPU time total"]),
    # two files: one call for both, then one call each (three fresh interpreters in all)
    pytest.param("bench_evaluate_many.py", ["--files", "2"], ["round 1: 2 files,", "one call each"],
                 marks=pytest.mark.slow),
    ("memory_probe.py", ["losses"], ["exit status 0; peak RssAnon"]),
    ("interrupt_probe.py", ["--every-ms", "20"], ["first call", "handler runs", "inside a ctypes callback"]),
    # one process and two (torchrun): two training commands of one epoch each
    pytest.param("bench_distributed.py", ["--parts", "parity", "--parity-epochs", "1"],
                 ["| 1 process(es) | 1 |", "| 2 process(es) | 1 |", "same epoch: True"],
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("script", "args", "expected"), CASES,
                         ids=[(case.values if hasattr(case, "values") else case)[0] for case in CASES])
def test_benchmark_script_runs(shared_dir, script, args, expected):
    env = {**os.environ, "SMOOTHRANK_SHARED": str(shared_dir), "OMP_WAIT_POLICY": "PASSIVE"}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{done.stderr[-3000:]}"
    missing = [line for line in expected if line not in done.stdout]
    assert not missing, f"{script} printed no {missing}:\n{done.stdout[-3000:]}"


def test_every_benchmark_script_is_smoke_tested():
    scripts = {path.name for path in (REPO / "benchmarks").glob("*.py") if not path.name.startswith("_")}
    assert scripts == {(case.values if hasattr(case, "values") else case)[0] for case in CASES}


@pytest.mark.parametrize(("script", "args", "fragment"), [
    ("bench_losses.py", ["--sizes", "4by8"], "--sizes: expected BATCHxN"),
    ("bench_losses.py", ["--rounds", "0"], "--rounds: expected a positive integer"),
    ("bench_losses.py", ["--peers", "neural_ndcg,soft_ndcg"], "--peers: unknown soft_ndcg"),
    ("bench_softrank.py", ["--sizes", "4by8"], "--sizes: expected BATCHxN"),
    ("profile_loss.py", ["--options", "k"], "--options: expected key=value pairs"),
    # counts of 0 ended in ZeroDivisionError or StatisticsError tracebacks (an audit)
    ("bench_io.py", ["--rounds", "0"], "--rounds: expected a positive integer"),
    ("bench_neuralsort_precision.py", ["--rounds", "0", "--sizes", "4x8"], "--rounds: expected a positive"),
    ("bench_neuralsort_precision.py", ["--sizes", "4by8"], "--sizes: expected BATCHxN"),
    ("bench_serving.py", ["--reps", "0"], "--reps: expected a positive integer"),
    ("bench_serving.py", ["--formats", "tflite"], "--formats: unknown format(s) ['tflite']"),
    ("profile_loss.py", ["--calls", "0", "--batch", "4", "--n", "8"], "--calls: expected a positive integer"),
    ("bench_training.py", ["--reps", "0", "--batch", "4", "--list-size", "8", "--features", "8",
                           "--losses", "list_mle", "--skip-mq2008"], "--reps: expected a positive integer"),
    ("bench_boosting.py", ["--calls", "0", "--cases", "list_mle"], "--calls: expected a positive integer"),
    ("bench_softrank.py", ["--threads", "0", "--no-peer", "--sizes", "4x8", "--rounds", "1", "--cases",
                           "soft_ndcg exact"], "--threads: expected a positive integer"),
    # "--peer" is no flag: as a prefix it meant --peer-large (the small arguments keep the old run short)
    ("bench_losses.py", ["--peer", "--no-peer", "--rounds", "1", "--repeats", "1", "--losses", "rmse",
                         "--sizes", "2x4"], "unrecognized arguments: --peer"),
])
def test_bad_flags_are_one_line_errors(script, args, fragment):
    # A review found raw ValueError tracebacks, and --rounds 0 printing "failed" rows with status 0.
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and fragment in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_set_threads_sets_numbas_threads_too():
    # SoftNDCG's kernels run on Numba's threads, every core by default whatever PyTorch was told.
    code = ("import numba, torch; from _args import set_threads; set_threads(1); "
            "print(numba.get_num_threads(), torch.get_num_threads())")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO / "benchmarks", capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1"]


@pytest.fixture
def bench_softrank(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    return importlib.import_module("bench_softrank")


def test_bench_softrank_prints_a_table_when_every_case_is_skipped(bench_softrank, monkeypatch, capsys):
    # allRank at n >= 1000 without --peer-large was the only case: a KeyError after all rounds.
    monkeypatch.setattr(importlib.import_module("bench_losses"), "install_peer", lambda: None)
    monkeypatch.setattr(bench_softrank, "run_case", lambda *a, **k: pytest.fail("nothing should run"))
    peer = bench_softrank.PEER_CASE
    assert bench_softrank.main(["--cases", peer, "--sizes", "4x1000", "--rounds", "1"]) == 0
    assert f"| {peer} | skipped |" in capsys.readouterr().out


def test_bench_softrank_children_import_this_checkout(bench_softrank, monkeypatch):
    # Run from another folder, the children measured whichever smoothrank was installed.
    seen = {}

    def fake_run(cmd, **kwargs):
        seen.update(kwargs["env"])
        return subprocess.CompletedProcess(cmd, 0, stdout='{"time_s": 0.1, "delta_mib": 1.0}\n', stderr="")

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setattr(subprocess, "run", fake_run)
    bench_softrank.run_case("soft_ndcg exact", 4, 8, threads=1, reps=1, timeout=10)
    assert seen["PYTHONPATH"].split(os.pathsep) == [str(REPO), "/elsewhere"]


def test_bench_losses_gives_each_rounds_ratio_to_allranks_neuralndcg(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    bench = importlib.import_module("bench_losses")
    monkeypatch.setattr(bench, "install_peer", lambda: None)
    times = {"ours": iter([0.1, 0.3, 0.02, 0.2, 0.6, 0.03]), "allRank": iter([2.0, 0.04, 3.0, 0.05])}

    def fake_run(impl, name, b, n, device, repeats):
        return {"time": next(times[impl]), "peak_mib": 1.0, "value": 0.5}

    monkeypatch.setattr(bench, "run_case", fake_run)
    assert bench.main(["--rounds", "2", "--losses", "neural_ndcg,soft_ndcg,approx_ndcg", "--sizes", "4x8",
                       "--peers", "neural_ndcg,approx_ndcg", "--no-naive"]) == 0
    out = capsys.readouterr().out
    assert "| neural_ndcg | 4 x 8 | allRank neuralNDCG | 0.050, 0.067 | 0.058 |" in out
    assert "| soft_ndcg | 4 x 8 | allRank neuralNDCG | 0.150, 0.200 | 0.175 |" in out
    assert "| approx_ndcg | 4 x 8 | allRank approxNDCGLoss | 0.500, 0.600 | 0.550 |" in out
    assert "| approx_ndcg | 4 x 8 | allRank neuralNDCG |" not in out
    assert "| naive" not in out and "lambda_rank | allRank" not in out
