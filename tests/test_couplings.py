import numpy as np
import pytest
from reference import random_system

import spinsa
from spinsa import couplings


def test_hebbian_matches_plain_formula_with_zero_diagonal(rng):
    xi = random_system(rng, P=7, N=5, d=3)[0]
    J = spinsa.hebbian_couplings(xi)
    expected = np.einsum("pia,pjb->ijab", xi, xi) / 7
    expected[np.arange(5), np.arange(5)] = 0
    np.testing.assert_allclose(J, expected, rtol=1e-12, atol=1e-15)
    assert J.dtype == np.float64
    assert spinsa.hebbian_couplings(xi.astype(np.float32)).dtype == np.float32


def test_random_couplings_are_seeded_scaled_and_have_zero_diagonal():
    J = spinsa.random_couplings(40, 6, scale=2.0, seed=1)
    assert J.shape == (40, 40, 6, 6) and J.dtype == np.float32
    assert np.all(J[np.arange(40), np.arange(40)] == 0)
    off = J[~np.eye(40, dtype=bool)]
    assert abs(off.std() - 2.0 / np.sqrt(6)) < 0.02
    np.testing.assert_array_equal(J, spinsa.random_couplings(40, 6, scale=2.0, seed=1))
    assert not np.array_equal(J, spinsa.random_couplings(40, 6, scale=2.0, seed=2))


def test_norm_helpers(rng):
    J = random_system(rng, P=1, N=5, d=3)[1]
    assert couplings.frobenius_norm(J) == pytest.approx(np.sqrt((J**2).sum()))
    np.testing.assert_allclose(couplings.row_norms(J), np.sqrt((J**2).sum(axis=(1, 2, 3))))
    assert couplings.frobenius_norm(couplings.set_norm(J, 3.0)) == pytest.approx(3.0)
    np.testing.assert_allclose(couplings.row_norms(couplings.set_row_norms(J, 2.0)), 2.0)
    values = np.arange(1.0, 6.0)
    np.testing.assert_allclose(couplings.row_norms(couplings.set_row_norms(J, values)), values)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: spinsa.random_couplings(1, 3), "N must be"),
        (lambda: spinsa.random_couplings(4, 0), "d must be"),
        (lambda: spinsa.random_couplings(4, 3, scale=0), "scale must be"),
        (lambda: couplings.set_norm(np.zeros((3, 3, 2, 2)), 1.0), "zero everywhere"),
        (lambda: couplings.set_row_norms(np.ones((3, 3, 2, 2)), -1.0), "finite and > 0"),
        (lambda: spinsa.hebbian_couplings(np.ones((3, 4))), "xi must have shape"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def lattice_bonds_by_hand(L, periodic):
    """The bonds of an L x L square lattice, from the neighbours of every site (r, c)."""
    A = np.zeros((L * L, L * L))
    for r in range(L):
        for c in range(L):
            for dr, dc in ((1, 0), (0, 1)):
                r2, c2 = r + dr, c + dc
                if not periodic and (r2 >= L or c2 >= L):
                    continue
                i, j = r * L + c, (r2 % L) * L + c2 % L
                A[i, j] += 1
                A[j, i] += 1
    return A


@pytest.mark.parametrize("periodic", [True, False])
def test_lattice_couplings_are_the_square_lattice(periodic):
    J = couplings.lattice_couplings((4, 4), d=3, coupling=0.5, periodic=periodic)
    assert J.shape == (16, 16, 3, 3) and J.dtype == np.float64
    A = lattice_bonds_by_hand(4, periodic)
    np.testing.assert_array_equal(J, 0.5 * A[:, :, None, None] * np.eye(3))
    assert (A.sum(1) == 4).all() if periodic else A.sum() == 2 * 24
    np.testing.assert_array_equal(J, J.transpose(1, 0, 3, 2))


def test_lattice_couplings_chain_rectangle_and_errors():
    chain = couplings.lattice_couplings(5, periodic=True)[:, :, 0, 0]
    np.testing.assert_array_equal(chain, np.roll(np.eye(5), 1, 1) + np.roll(np.eye(5), -1, 1))
    two = couplings.lattice_couplings(2)[:, :, 0, 0]  # the two bonds of a ring of 2 sites
    np.testing.assert_array_equal(two, [[0, 2], [2, 0]])
    rect = couplings.lattice_couplings((2, 3), periodic=False)[:, :, 0, 0]
    assert rect.sum() == 2 * 7  # 2 x 3 grid: 3 vertical + 4 horizontal bonds
    with pytest.raises(ValueError, match="lattice length"):
        couplings.lattice_couplings((4, 1))
    with pytest.raises(ValueError, match="coupling must be a finite"):
        couplings.lattice_couplings(4, coupling=np.inf)
