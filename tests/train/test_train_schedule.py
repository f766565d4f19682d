import math
from itertools import pairwise

import pytest

from datamind.train.schedule import cosine_gamma, gamma_at


def test_cosine_gamma_endpoints_and_midpoint():
    assert [cosine_gamma(s, 3) for s in range(3)] == pytest.approx([0.9, 0.475, 0.05])


def test_cosine_gamma_quarter():
    # progress 1/4: 0.05 + 0.425 * (1 + cos(pi/4))
    assert cosine_gamma(1, 5) == pytest.approx(0.05 + 0.425 * (1 + math.sqrt(2) / 2))


def test_cosine_gamma_monotone_and_bounded():
    values = [cosine_gamma(s, 50, 0.9, 0.05) for s in range(50)]
    assert all(a >= b for a, b in pairwise(values))
    assert values[0] == pytest.approx(0.9) and values[-1] == pytest.approx(0.05)


def test_single_step_and_constant():
    assert cosine_gamma(0, 1) == 0.9
    assert gamma_at(7, 10, "constant", 0.5, 0.1) == 0.5
    with pytest.raises(ValueError):
        gamma_at(0, 10, "linear", 0.9, 0.05)
    with pytest.raises(ValueError):
        cosine_gamma(0, 0)
