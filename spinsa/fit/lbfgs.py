"""L-BFGS backend of the pseudo-likelihood fit: scipy ``L-BFGS-B``, full batch, numba objective.

The norm constraint (docs/model.md, 'The objective') is handled without projections inside
the line search:

- ``"global"``: J = c·W/|W| over the off-diagonal blocks W; the objective in W is
  f(W) = L(c·W/|W|) with gradient ∇_W f = (c/|W|)(g - (ĵ·g) ĵ), g = ∂L/∂J, ĵ = W/|W|.
  One problem of N(N-1)d² variables; the objective kernel is parallel over rows.
- ``"row"``: J_i· = c_i·W_i/|W_i| for every row: N independent problems of (N-1)d² variables,
  solved in a thread pool, each calling the single-threaded, GIL-free row kernel.
- ``"l2"``: f(J) = L(J) + (l2/2)|J|², no reparametrisation; ``"none"``: f(J) = L(J) (for the
  normalised pseudo-likelihood, which is bounded below; on degenerate data its minimum is
  at infinity, and the fit stops, not converged, once |J| passes
  :func:`spinsa.fit.convergence.divergence_norm`).

The diagonal blocks are not variables, so they stay exactly zero. The fit runs in segments of
``segment_iters`` iterations, each a fresh L-BFGS started from the couplings the previous one
ended with (renormalised to the constraint); between segments the history is recorded and the
checkpoint written.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from spinsa.fit.convergence import divergence_norm, lbfgs_criterion, mark_diverged
from spinsa.fit.objective import constrained_grad, frobenius, full_objective, row_objective

__all__ = ["fit_lbfgs"]


def _minimize(fun, v0, maxiter: int, config, on_iteration):
    from scipy.optimize import minimize

    return minimize(
        fun,
        v0,
        jac=True,
        method="L-BFGS-B",
        callback=lambda intermediate_result: on_iteration(intermediate_result.x),
        options=dict(
            maxiter=maxiter,
            maxfun=max(20 * maxiter, 100),
            maxcor=config.history_size,
            gtol=config.gtol,
            ftol=config.ftol,
        ),
    )


class _Diverged(Exception):
    """Raised by the L-BFGS callback once |J| passes the divergence norm: ends the solver at
    the couplings ``v`` of norm ``norm``."""

    def __init__(self, v: np.ndarray, norm: float):
        super().__init__(norm)
        self.v, self.norm = v, norm


class _Cache:
    """The last point the objective was evaluated at, to give the callback its gradient norm."""

    def __init__(self):
        self.v = None
        self.loss = np.nan
        self.gnorm = np.nan

    def store(self, v, loss, gnorm):
        self.v = v.copy()
        self.loss, self.gnorm = loss, gnorm

    def lookup(self, v, fun):
        if self.v is None or not np.array_equal(v, self.v):
            fun(v)
        return self.loss, self.gnorm


def fit_lbfgs(xi: np.ndarray, state, config, run) -> None:
    """Full-batch L-BFGS fit; updates ``state`` in place (see :mod:`spinsa.fit.api`)."""
    import numba

    rows = config.constraint == "row"
    state.criterion = lbfgs_criterion(config.gtol, config.ftol, config.max_iter, rows=rows)
    if rows:
        state.device = f"cpu (numba row kernel, {_workers(config)} threads)"
        _fit_rows(xi, state, config, run)
    else:
        state.device = f"cpu (numba, {numba.get_num_threads()} threads)"
        _fit_global(xi, state, config, run)


def _blas_single_thread():
    """Limit BLAS to one thread while rows run in our own threads (threadpoolctl, if present).

    The solver's vector operations are small and the rows already fill the cores; a
    multi-threaded BLAS woken for every dot product next to numba's threads made a row fit
    about ten times slower on a loaded machine.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _workers(config) -> int:
    import numba

    return config.workers or numba.get_num_threads()


def _tangent(v: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, float]:
    """g minus its component along v (the gradient at fixed |v|), and |v|."""
    nv = float(np.linalg.norm(v))
    jhat = v / nv
    return g - float(jhat @ g) * jhat, nv


# ------------------------------------------------------------------ one problem
def _fit_global(xi: np.ndarray, state, config, run) -> None:
    full_kernel = full_objective(xi, config.score_clamp, config.loss)
    P, N, d = xi.shape
    dtype = xi.dtype
    lam = config.lam
    l2 = config.l2 if config.constraint == "l2" else 0.0
    offd = ~np.eye(N, dtype=bool)
    penalty = config.constraint in ("l2", "none")
    c = None if penalty else float(state.targets[0])
    J = np.zeros((N, N, d, d), dtype=dtype)
    G = np.empty_like(J)
    cache = _Cache()
    limit = divergence_norm(config, N)

    def couplings(v):
        W = v.reshape(N * (N - 1), d, d)
        J[offd] = W if penalty else W * (c / np.linalg.norm(v))
        return J

    def fun(v):
        loss = full_kernel(couplings(v), lam, G)
        g = G[offd].ravel().astype(np.float64)
        state.n_samples_seen += P
        if penalty:
            grad = g + l2 * v
            cache.store(v, loss, float(np.linalg.norm(grad)))
            return loss + 0.5 * l2 * float(v @ v), grad
        gp, nv = _tangent(v, g)
        cache.store(v, loss, float(np.linalg.norm(gp)))
        return loss, gp * (c / nv)

    def evaluate(Jc):
        loss = full_kernel(Jc, lam, G)
        state.n_samples_seen += P
        return float(loss), float(np.linalg.norm(constrained_grad(Jc, G, config.constraint, l2)))

    if not state.epoch_loss:
        run.record_epoch(*evaluate(state.J))

    while not state.finished:
        remaining = config.max_iter - state.iterations
        if remaining <= 0:
            state.finished = True
            state.message = f"reached max_iter = {config.max_iter} iterations"
            state.converged = False
            break
        v0 = state.J[offd].ravel().astype(np.float64)
        maxiter = min(config.segment_iters, remaining)

        nit = 0

        def on_iteration(v):
            nonlocal nit
            loss, gnorm = cache.lookup(v, fun)
            Jc = couplings(v)
            norm = frobenius(Jc)
            run.record_step(loss, gnorm, norm, lambda: Jc.copy())
            nit += 1
            if norm > limit:  # |J| runs away: stop here, and never call it converged
                raise _Diverged(v.copy(), norm)

        res = stop = None
        try:
            res = _minimize(fun, v0, maxiter, config, on_iteration)
        except _Diverged as diverged:
            stop = diverged
        v, n = (stop.v, nit) if stop is not None else (res.x, int(res.nit))
        state.J = couplings(v).copy()
        state.iterations += n
        state.epoch += 1
        if stop is not None:
            state.finished = True
            when = f"after {state.iterations} iterations"
            # stacklevel 7: the user's call of fit_pseudolikelihood
            mark_diverged(state, config, stop.norm, limit, when, stacklevel=7)
        else:
            state.message = str(res.message)
            if res.nit < maxiter:  # stopped on a tolerance or a failed line search
                state.finished = True
                state.converged = bool(res.success)
        run.record_epoch(*evaluate(state.J))
        run.end_of_epoch(checkpoint_now=True)


# ------------------------------------------------------------------ one problem per row
def _solve_row(xi, state_J, i, c_i, config, maxiter, row_kernel):
    """L-BFGS on row i for at most ``maxiter`` iterations.

    Returns (J_row, nit, success, losses, gnorm2s, nfev) where losses[0] / gnorm2s[0] are
    at the starting point and [t] after iteration t; nfev counts the evaluation at the start.
    """
    N, _, d, _ = state_J.shape
    lam = config.lam
    keep = np.arange(N) != i
    J_row = np.zeros((N, d, d), dtype=xi.dtype)
    G_row = np.empty_like(J_row)
    cache = _Cache()

    def couplings(v):
        J_row[keep] = (v * (c_i / np.linalg.norm(v))).reshape(N - 1, d, d)
        return J_row

    def fun(v):
        loss = row_kernel(couplings(v), lam, i, G_row)
        gp, nv = _tangent(v, G_row[keep].ravel().astype(np.float64))
        cache.store(v, loss, float(gp @ gp))
        return loss, gp * (c_i / nv)

    v0 = state_J[i][keep].ravel().astype(np.float64)
    fun(v0)
    losses, gnorm2s = [cache.loss], [cache.gnorm]

    def on_iteration(v):
        loss, g2 = cache.lookup(v, fun)
        losses.append(loss)
        gnorm2s.append(g2)

    res = _minimize(fun, v0, maxiter, config, on_iteration)
    nfev = int(res.nfev) + 1
    return couplings(res.x).copy(), int(res.nit), bool(res.success), losses, gnorm2s, nfev


def _fit_rows(xi: np.ndarray, state, config, run) -> None:
    row_kernel = row_objective(xi, config.score_clamp, config.loss)
    P, N, d = xi.shape
    targets = np.asarray(state.targets, dtype=np.float64)
    if state.row_iters is None:
        state.row_iters = np.zeros(N, dtype=np.int64)
        state.row_done = np.zeros(N, dtype=bool)
        state.row_success = np.zeros(N, dtype=bool)
        state.row_loss = np.zeros(N)
        state.row_gnorm2 = np.zeros(N)
        G_row = np.empty((N, d, d), dtype=xi.dtype)
        for i in range(N):
            state.row_loss[i] = row_kernel(state.J[i], config.lam, i, G_row)
            state.n_samples_seen += P / N
            J_i = state.J[i].astype(np.float64)
            g = G_row.astype(np.float64)
            g -= (np.vdot(J_i, g) / np.vdot(J_i, J_i)) * J_i
            g[i] = 0.0
            state.row_gnorm2[i] = float(np.vdot(g, g))
    if not state.epoch_loss:
        run.record_epoch(float(state.row_loss.sum()), float(np.sqrt(state.row_gnorm2.sum())))
    norm_J = float(np.sqrt((targets**2).sum()))

    with _blas_single_thread(), ThreadPoolExecutor(max_workers=_workers(config)) as pool:
        while not state.finished:
            active = [
                i
                for i in range(N)
                if not state.row_done[i] and state.row_iters[i] < config.max_iter
            ]
            if not active:
                state.finished = True
                n_conv = int(state.row_success.sum())
                state.converged = bool(state.row_success.all())
                state.message = (
                    f"{n_conv} of {N} rows stopped on a tolerance; "
                    f"{int((~state.row_done).sum())} reached max_iter = {config.max_iter}"
                )
                break
            futures = {
                i: pool.submit(
                    _solve_row,
                    xi,
                    state.J,
                    i,
                    float(targets[i]),
                    config,
                    min(config.segment_iters, config.max_iter - int(state.row_iters[i])),
                    row_kernel,
                )
                for i in active
            }
            results = {i: f.result() for i, f in futures.items()}
            # the rows' histories, padded with their last value, summed into global ones
            length = max(len(r[4]) for r in results.values())
            loss_t = np.full(length, float(state.row_loss.sum()))
            g2_t = np.full(length, float(state.row_gnorm2.sum()))
            for i, (J_row, nit, success, losses, g2s, nfev) in results.items():
                pad_l = np.pad(losses, (0, length - len(losses)), mode="edge")
                pad_g = np.pad(g2s, (0, length - len(g2s)), mode="edge")
                loss_t += pad_l - state.row_loss[i]
                g2_t += pad_g - state.row_gnorm2[i]
                state.J[i] = J_row
                state.row_iters[i] += nit
                state.row_loss[i] = losses[-1]
                state.row_gnorm2[i] = g2s[-1]
                state.n_samples_seen += nfev * P / N  # a row costs 1/N of a full evaluation
                if nit < min(config.segment_iters, config.max_iter - (state.row_iters[i] - nit)):
                    state.row_done[i] = True
                    state.row_success[i] = success
            Jc = state.J
            for t in range(1, length):
                run.record_step(
                    float(loss_t[t]), float(np.sqrt(g2_t[t])), norm_J, lambda J=Jc: J.copy()
                )
            state.iterations = int(state.row_iters.max())
            state.epoch += 1
            run.record_epoch(float(state.row_loss.sum()), float(np.sqrt(state.row_gnorm2.sum())))
            run.end_of_epoch(checkpoint_now=True)
