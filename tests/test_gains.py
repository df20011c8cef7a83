import math

import pytest
import torch

from smoothrank.gains import discount, first_infinite_gain, gain


def test_gains():
    labels = torch.tensor([0.0, 1.0, 2.0, 4.0], dtype=torch.float64)
    assert gain(labels, "exp2").tolist() == [0.0, 1.0, 3.0, 15.0]
    assert gain(labels, "linear").tolist() == [0.0, 1.0, 2.0, 4.0]
    assert gain(labels, {0: 0.0, 1: 1.0, 2: 3.0, 4: 31.0}).tolist() == [0.0, 1.0, 3.0, 31.0]
    assert gain(labels, lambda x: x * 2).tolist() == [0.0, 2.0, 4.0, 8.0]


def test_discounts():
    r = torch.arange(1, 6, dtype=torch.float64)
    assert discount(r, "log2").tolist() == pytest.approx([1 / math.log2(i + 1) for i in range(1, 6)])
    assert discount(r, "letor").tolist() == pytest.approx([1, 1, 1 / math.log2(3), 0.5, 1 / math.log2(5)])
    assert discount(r, "linear", list_size=5).tolist() == [4, 3, 2, 1, 0]


@pytest.mark.parametrize("bad", ["exp", "log", 3])
def test_unknown_names_are_clear_errors(bad):
    with pytest.raises(ValueError, match="gain"):
        gain(torch.zeros(2), bad)
    with pytest.raises(ValueError, match="discount"):
        discount(torch.ones(2), bad)


def test_unmapped_label_is_an_error():
    with pytest.raises(ValueError, match=r"\[3.0\]"):
        gain(torch.tensor([0.0, 3.0]), {0: 0.0, 1: 1.0})


def test_a_mapping_matches_float32_labels_widened_to_float64():
    # load_letor stores real-valued labels in float32; the metrics widen them to float64, where 0.1f is
    # 0.10000000149...: the mapping's key 0.1 used to miss it ("labels [...] have no entry")
    widened = torch.tensor([0.1, 0.0, 0.3], dtype=torch.float32).double()
    assert gain(widened, {0.0: 0, 0.1: 1, 0.3: 3}).tolist() == [1.0, 0.0, 3.0]
    # a key equal to the label exactly wins over one that only rounds to it
    assert gain(widened[:1], {0.1: 1, widened[0].item(): 5}).tolist() == [5.0]
    assert gain(torch.tensor([0.1], dtype=torch.float64), {0.1: 1, widened[0].item(): 5}).tolist() == [1.0]
    with pytest.raises(ValueError, match="no entry"):  # a float64 label that is neither
        gain(torch.tensor([0.1000001], dtype=torch.float64), {0.1: 1})


def test_linear_discount_needs_list_size():
    with pytest.raises(ValueError, match="list_size"):
        discount(torch.ones(2), "linear")


def test_first_infinite_gain_finds_the_first_label_beyond_the_dtype():
    labels = [0.0, 127, 3, 128, 1024, 128]
    assert first_infinite_gain(labels, "exp2", dtype=torch.float32) == 3  # 2^128 - 1 is inf in float32
    assert first_infinite_gain(labels, "exp2", dtype=torch.float64) == 4  # 2^1024 - 1 in float64
    assert first_infinite_gain(labels, "linear", dtype=torch.float32) is None
    mapping = {0: 0, 127: 1, 3: 2, 128: 1e300, 1024: 1}  # 1e300 is inf in float32
    assert first_infinite_gain(labels, mapping) == 3
    # an unmapped label, or a gain that is not elementwise, is gain()'s callers' to report
    assert first_infinite_gain(labels, {0: 0}) is None
    assert first_infinite_gain(labels, lambda y: y.sum()) is None
    assert first_infinite_gain([], "exp2") is None


def test_first_infinite_gain_reads_a_block_at_a_time(monkeypatch):
    import numpy as np

    from smoothrank import gains

    monkeypatch.setattr(gains, "_GAIN_BLOCK", 4)  # labels of a memory-mapped dataset: read-only
    labels = np.zeros(11, dtype=np.float32)
    labels[9] = 200.0
    labels.flags.writeable = False
    assert first_infinite_gain(labels, "exp2") == 9  # in the third block
    assert first_infinite_gain(labels[:8], "exp2") is None
    assert first_infinite_gain(labels.reshape(1, 11), "exp2", dtype=torch.float64) is None
