"""`ir.make` builders: dtype promotion and the exact integer folds they do on the way."""

from __future__ import annotations

from sparsetir_py.ir import make as mk
from sparsetir_py.ir.buffer import FlatBuffer
from sparsetir_py.ir.expr import BinOp, BufferLoad, IntImm, Var

INDPTR = FlatBuffer("J_indptr", (IntImm(10, "int32"),), "int32")
I = Var("i")


def row_start(i=I):
    return BufferLoad(INDPTR, (i,))


def test_row_start_plus_position_in_row_cancels():
    """The offset of a fused iterator, `indptr[i] + (p - indptr[i])`, is `p` (built twice: equal
    by value, not the same object)."""
    p = Var("p")
    assert mk.add(row_start(), mk.sub(p, row_start())) is p
    assert mk.add(mk.sub(p, row_start()), row_start()) is p
    assert mk.sub(mk.add(row_start(), p), row_start()) is p
    assert mk.sub(mk.add(p, row_start()), row_start()) is p


def test_no_cancellation_of_different_terms_or_floats():
    p, q = Var("p"), Var("q")
    assert isinstance(mk.add(q, mk.sub(p, row_start())), BinOp)
    assert isinstance(mk.add(row_start(Var("i")), mk.sub(p, row_start())), BinOp)  # another row
    same_name = Var("p")  # another variable of the same name is another variable
    assert isinstance(mk.sub(mk.add(p, q), same_name), BinOp)
    x, y = Var("x", "float32"), Var("y", "float32")
    e = mk.add(x, mk.sub(y, x))  # not exact in floating point
    assert isinstance(e, BinOp) and e.op == "+"
