"""The shapes a client-state table can declare (:data:`STATE_SHAPES`) and the entries of one
row of a table for a given model (:func:`table_entries`, what
:meth:`simulator.algorithms.base.Algorithm.state_entries` answers). Not an algorithm: nothing is
registered here.
"""

from __future__ import annotations

from typing import Any

#: shapes a client-state table can declare: the trainable parameters, the whole flat model, or
#: the row the client sends (:meth:`Algorithm.row_entries`), or one entry per sample of the
#: server's public set and class (``|D_r| x C``: predictions on it); an int is that many entries
STATE_SHAPES = ("params", "model", "row", "public")


def table_entries(algorithm: Any, table: str, layout: Any, public_entries: int = 0) -> int:
    """Entries of one row of ``algorithm``'s client-state table ``table``.

    Parameters
    ----------
    algorithm : Any
        The :class:`~simulator.algorithms.base.Algorithm` whose :attr:`client_state` declares
        the table (its ``name``, ``upload`` and ``row_entries`` are read too).
    table : str
        The table's name, a key of ``algorithm.client_state``.
    layout : Any
        The model's :class:`~simulator.training.flat.FlatLayout`.
    public_entries : int
        The run's public samples x classes; 0 without a public set.

    Returns
    -------
    int
        The declared shape resolved for a model of ``layout``; ValueError, in one line naming
        the valid shapes, otherwise.
    """
    shape = algorithm.client_state[table]
    if callable(shape):
        shape = int(shape(layout))
    if shape == "row" and algorithm.upload != "update":
        shape = algorithm.row_entries(layout)
    if shape == "public" and public_entries >= 1:
        shape = public_entries
    if isinstance(shape, int) and not isinstance(shape, bool) and shape >= 1:
        return shape
    if shape in ("params", "model"):
        return int(layout.num_params if shape == "params" else layout.size)
    raise ValueError(
        f"algorithm {algorithm.name!r}: client_state table {table!r} has shape {shape!r}; "
        f"valid: {list(STATE_SHAPES)} ('row' with an upload other than model updates, "
        "'public' with a public set), an int >= 1 or a callable of the layout"
    )
