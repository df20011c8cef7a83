"""smoothrank export: raw features in, the fitted transforms inside the graph, the scores of
``smoothrank predict`` out (onnxruntime, TorchScript, torch.export), on MQ2008 with padding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from smoothrank.data import evaluation_batches
from smoothrank.data.transforms import Compose, QueryMinMax, SignedLog1p, Standardize
from smoothrank.datasets import load_mq2008
from smoothrank.export import ExportError, export_model
from smoothrank.models import build_model
from smoothrank.models.scoring import scoring_module
from smoothrank.training import load_model, save_model
from smoothrank.training.config import config_from_dict

MODELS = {
    "linear": {"kind": "linear"},
    "mlp": {"kind": "mlp", "hidden": [16, 8], "norm": "batch", "activation": "tanh"},
    "context_aware": {"kind": "context_aware", "input_dim": 8, "n_blocks": 1, "n_heads": 2, "hidden": 16},
}
TRANSFORMS = {
    "none": None,
    "standardize": lambda: Standardize(),
    "query_minmax": lambda: QueryMinMax(),
    "signed_log1p": lambda: SignedLog1p(features=[0, 3, 17, 40]),
    "per_document": lambda: Compose([SignedLog1p(features=[0, 3, 17, 40]), Standardize()]),
    # every transform in one graph, a query-level one after the others
    "all": lambda: Compose([SignedLog1p(features=list(range(10))), Standardize(), QueryMinMax()]),
}


pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")


SUFFIX = {"onnx": "onnx", "torchscript": "ts", "exported-program": "pt2"}


@pytest.fixture(scope="module")
def mq2008():
    # a slice of MQ2008 Fold1 (bundled): training rows fit the transforms, test queries are scored
    train, test = load_mq2008(1, "train"), load_mq2008(1, "test")
    return train, test.subset(np.arange(60))


def _artifact(path, train, kind: str, transform: str, seed: int = 0):
    torch.manual_seed(seed)
    network = build_model(MODELS[kind], train.n_features)
    for param in network.parameters():  # larger weights than the initial ones: scores that differ
        param.data.mul_(3.0)
    if kind == "mlp":  # batch norm statistics other than the identity
        network.net[1].running_mean.uniform_(-0.5, 0.5)
        network.net[1].running_var.uniform_(0.5, 2.0)
    make = TRANSFORMS[transform]
    state = None if make is None else make().fit(train).state_dict()
    config = config_from_dict({"data": {"mq2008_fold": 1}, "model": MODELS[kind]})
    save_model(path, network.eval(), config=config, n_features=train.n_features, transform_state=state)
    return path


def _padded(test, batch_size: int = 16):
    """Raw test features as padded batches (padding holds NaN), the padded rows and the masks."""
    for batch in evaluation_batches(test, batch_size=batch_size):
        features = batch.features.clone()
        features[~batch.mask] = torch.nan
        yield features, batch.mask, batch.rows.numpy()


def _run(path, fmt: str, features: torch.Tensor, mask: torch.Tensor, with_mask: bool) -> np.ndarray:
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed = {"features": features.numpy()}
        if with_mask:
            feed["mask"] = mask.numpy()
        (scores,) = session.run(["scores"], feed)
        return scores
    module = torch.jit.load(str(path)) if fmt == "torchscript" else torch.export.load(str(path)).module()
    with torch.no_grad():
        return (module(features, mask) if with_mask else module(features)).numpy()


def _check_parity(artifact, exported, fmt: str, test, with_mask: bool) -> None:
    expected = load_model(artifact).score(test)  # what `smoothrank predict` writes
    seen = np.zeros(test.n_docs, dtype=bool)
    for features, mask, rows in _padded(test):
        for flip in (False, True):  # padding at the end of a list, then at its front
            f, m, r = (features.flip(1), mask.flip(1), rows[:, ::-1]) if flip else (features, mask, rows)
            scores = _run(exported, fmt, f, m, with_mask)
            assert scores.dtype == np.float32 and scores.shape == tuple(m.shape)
            real = r >= 0
            np.testing.assert_allclose(scores[real], expected[r[real]], rtol=0, atol=1e-5)
            if with_mask:
                assert (scores[~real] == 0).all()
            seen[r[real]] = True
    assert seen.all()


@pytest.fixture(scope="module")
def exports(tmp_path_factory, mq2008):
    """``get(kind, transform, fmt) -> (artifact, exported file, with_mask)``, each export made once."""
    made = {}
    folder = tmp_path_factory.mktemp("exports")

    def get(kind: str, transform: str, fmt: str):
        key = (kind, transform, fmt)
        if key not in made:
            artifact = folder / f"{kind}-{transform}.pt"
            if not artifact.exists():
                _artifact(artifact, mq2008[0], kind, transform)
            exported = folder / f"{kind}-{transform}.{SUFFIX[fmt]}"
            made[key] = artifact, exported, export_model(artifact, exported, format=fmt)
        return made[key]

    return get


@pytest.mark.slow  # nine exports: about 25 s of CPU time
@pytest.mark.parametrize("fmt", ["onnx", "torchscript", "exported-program"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_every_format_scores_as_predict_with_every_transform_in_the_graph(exports, mq2008, kind, fmt):
    artifact, exported, with_mask = exports(kind, "all", fmt)
    assert with_mask  # query_minmax is query-level
    _check_parity(artifact, exported, fmt, mq2008[1], with_mask)


@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("kind", list(MODELS))
def test_each_transform_and_model_as_one_module_scores_as_predict(tmp_path, mq2008, kind, transform):
    # the module every format exports, run eagerly: each transform alone, each model kind
    train, test = mq2008
    artifact = load_model(_artifact(tmp_path / "model.pt", train, kind, transform))
    module = scoring_module(artifact.model, artifact.transform_state, artifact.n_features, with_mask=True)
    expected = artifact.score(test)
    for features, mask, rows in _padded(test):
        with torch.no_grad():
            scores = module(features, mask).numpy()
        real = rows >= 0
        np.testing.assert_allclose(scores[real], expected[rows[real]], rtol=0, atol=1e-5)
        assert (scores[~real] == 0).all()


def test_a_per_document_model_exports_features_only(exports, mq2008):
    # no query-level transform and a per-item model: the graph takes features only
    import onnxruntime

    artifact, exported, with_mask = exports("mlp", "per_document", "onnx")
    assert with_mask is False
    session = onnxruntime.InferenceSession(str(exported), providers=["CPUExecutionProvider"])
    assert [(i.name, i.type) for i in session.get_inputs()] == [("features", "tensor(float)")]
    assert [o.name for o in session.get_outputs()] == ["scores"]
    _check_parity(artifact, exported, "onnx", mq2008[1], with_mask=False)


def test_onnx_inputs_outputs_and_dynamic_sizes(exports, mq2008):
    import onnxruntime

    n_features = mq2008[0].n_features
    _, exported, _ = exports("context_aware", "all", "onnx")
    session = onnxruntime.InferenceSession(str(exported), providers=["CPUExecutionProvider"])
    inputs = {i.name: (i.type, i.shape) for i in session.get_inputs()}
    assert inputs["features"][0] == "tensor(float)" and inputs["features"][1][2] == n_features
    assert inputs["mask"][0] == "tensor(bool)"
    assert all(isinstance(d, str) for d in inputs["features"][1][:2] + inputs["mask"][1])  # dynamic
    output = session.get_outputs()[0]
    assert output.name == "scores" and output.type == "tensor(float)" and len(output.shape) == 2
    for batch, width in ((1, 1), (5, 100), (2, 3)):
        (scores,) = session.run(None, {"features": np.ones((batch, width, n_features), np.float32),
                                       "mask": np.ones((batch, width), bool)})
        assert scores.shape == (batch, width)


def test_cli_export_writes_what_predict_scores(tmp_path, mq2008, capsys):
    from smoothrank.cli import main

    train, test = mq2008
    artifact = _artifact(tmp_path / "model.pt", train, "mlp", "all")
    assert main(["export", str(artifact), "--format", "torchscript", "--out", str(tmp_path / "m.ts")]) == 0
    assert "inputs: features, mask" in capsys.readouterr().err
    _check_parity(artifact, tmp_path / "m.ts", "torchscript", test, with_mask=True)
    # `smoothrank predict` itself, on the same queries as a LETOR file: the exported graph's scores
    from smoothrank.data import read_predictions, write_letor

    write_letor(tmp_path / "test.txt", test)
    assert main(["predict", str(artifact), str(tmp_path / "test.txt"), "--out", str(tmp_path / "p")]) == 0
    predicted = read_predictions(tmp_path / "p", expected=test.n_docs)
    module = torch.jit.load(str(tmp_path / "m.ts"))
    for features, mask, rows in _padded(test):
        with torch.no_grad():
            scores = module(features, mask).numpy()
        np.testing.assert_allclose(scores[rows >= 0], predicted[rows[rows >= 0]], rtol=0, atol=1e-5)
    assert main(["export", str(artifact), "--out", str(artifact)]) != 0  # the input itself
    assert "is the MODEL file" in capsys.readouterr().err
    assert main(["export", str(artifact), "--out", str(tmp_path / "no" / "m.onnx")]) != 0
    assert "--out: cannot write" in capsys.readouterr().err


def test_export_of_a_fitted_smoothranker(tmp_path, mq2008):
    pytest.importorskip("sklearn")
    from smoothrank.sklearn import SmoothRanker

    train, test = mq2008[0].subset(np.arange(40)), mq2008[1]
    ranker = SmoothRanker(hidden=(8,), transforms=("standardize",), epochs=1, random_state=0, num_threads=1)
    ranker.fit(train.features, train.labels, qid=train.query_of_row())
    assert export_model(ranker, tmp_path / "model.ts", format="torchscript") is False
    module = torch.jit.load(str(tmp_path / "model.ts"))
    with torch.no_grad():
        scores = module(torch.from_numpy(test.features[None])).numpy()[0]
    np.testing.assert_allclose(scores, ranker.predict(test.features), rtol=0, atol=1e-5)


def test_bad_format_and_model_are_named(tmp_path, mq2008):
    train, _ = mq2008
    artifact = _artifact(tmp_path / "model.pt", train, "linear", "none")
    with pytest.raises(ExportError, match="format: expected one of onnx, torchscript, exported-program"):
        export_model(artifact, tmp_path / "x", format="tflite")
    with pytest.raises(ExportError, match="model: expected a model file"):
        export_model(object(), tmp_path / "x")
    with pytest.raises(ExportError, match=r"a file ending in \.pt2"):
        export_model(artifact, tmp_path / "x", format="exported-program")
    assert not (tmp_path / "x").exists()


# --- scoring from arrays -------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["mlp", "context_aware"])
def test_a_loaded_model_scores_arrays_as_predict_does(exports, mq2008, kind):
    artifact, _, _ = exports(kind, "all", "torchscript")
    _, test = mq2008
    loaded = load_model(artifact)
    expected = loaded.score(test)
    qid = test.query_of_row()
    perm = np.random.default_rng(0).permutation(test.n_docs)  # queries interleaved, rows shuffled
    scores = loaded.predict(test.features[perm].astype(np.float64), qid=qid[perm], batch_size=7)
    assert scores.dtype == np.float64 and scores.shape == (test.n_docs,)
    np.testing.assert_allclose(scores, expected[perm], rtol=0, atol=1e-5)
    for q in (0, 5):
        rows = slice(test.offsets[q], test.offsets[q + 1])
        np.testing.assert_allclose(loaded.score_query(test.features[rows]), expected[rows], rtol=0, atol=1e-5)


def test_array_scoring_refuses_bad_input_naming_it(exports, mq2008):
    from smoothrank.errors import SmoothrankError

    loaded = load_model(exports("mlp", "all", "torchscript")[0])
    width = loaded.n_features
    with pytest.raises(SmoothrankError, match=rf"features: expected shape \(n_rows, {width}\)"):
        loaded.predict(np.zeros((3, width - 1)))
    bad = np.zeros((3, width))
    bad[2, 4] = np.nan
    with pytest.raises(SmoothrankError, match=r"features\[2, 4\] is nan"):
        loaded.score_query(bad)
    with pytest.raises(SmoothrankError, match=r"qid: expected one query id per row \(3,\)"):
        loaded.predict(np.zeros((3, width)), qid=[1, 2])
    huge = np.zeros((4, width))
    huge[2, 20] = 3e38  # finite float32, beyond it once standardised
    for qid in (None, [7, 8, 7, 8]):
        with pytest.raises(SmoothrankError, match=r"features\[2, 20\] \(3e\+38\) is inf after the fitted "
                                                  r"Standardize transform"):
            loaded.predict(huge, qid=qid)


def test_loading_and_scoring_import_only_what_scoring_needs(exports):
    # no config validation (pydantic), YAML, progress bars (beyond what torch itself imports),
    # Numba or the trainer: a subprocess, so that nothing imported by the tests counts
    import subprocess
    import sys

    artifact = exports("context_aware", "all", "torchscript")[0]
    listing = "import sys, json; print(json.dumps(sorted(sys.modules)))"
    baseline = subprocess.run([sys.executable, "-c", f"import numpy, torch\n{listing}"], capture_output=True,
                              text=True, check=True)
    code = (f"import numpy as np, smoothrank\nmodel = smoothrank.load_model({str(artifact)!r})\n"
            f"model.predict(np.ones((5, model.n_features)), qid=[1, 1, 2, 2, 2])\n"
            f"model.score_query(np.ones((3, model.n_features)))\n{listing}")
    scoring = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    import json

    added = set(json.loads(scoring.stdout)) - set(json.loads(baseline.stdout))
    roots = {name.split(".")[0] for name in added}
    assert not roots & {"pydantic", "yaml", "tqdm", "numba", "scipy", "sklearn", "onnx"}, roots
    assert not {"smoothrank.training.config", "smoothrank.training.trainer"} & added
