"""The four partial sums of a dense row's dot products, as one vector of four lanes.

Every dot product of the kernels sums element j into partial sum j mod 4 (see
:mod:`learning._kernels`, Determinism). Written as four scalars, those sums compile to scalar
code: numba turns LLVM's SLP vectoriser off, and the loop vectoriser may not reorder a
floating-point sum. Here the four sums are the four lanes of one LLVM ``<4 x double>``: lane l
takes exactly the products the scalar partial sum l takes, in the same order, each a
multiplication then an addition rounded separately (no fast-math flags, so no contraction into a
fused multiply-add), so the sums are bit-identical to the scalar ones on any CPU (one
without 256-bit vectors runs the same lanes in narrower registers). A dense row at d = 1000 is
then scored about twice as fast as by the scalar loop.

:func:`lane_dots` also checks the values it reads (finite and within ±``limit``), so a kernel can
score a row and refuse it in one pass over the row.
"""

from __future__ import annotations

from typing import Any

from learning.jit import intrinsic

LANES = 4
"""Elements per vector: the kernels' four partial sums (learning._kernels.UNROLL)."""
SUMS = 3
"""Dot products summed per pass: a·x, b·x and x·x."""
FLAGS = 2
"""Flags a pass returns: every value within the limit, every value non-zero."""
ELEMENT_ALIGNMENT = 8
"""A float64 array's data is aligned to its element size, not to a vector's."""


def _lane_dots_intrinsic(  # noqa: PLR0917  # pragma: no cover - compiled
    typingctx: Any, a: Any, b: Any, x: Any, m: Any, limit: Any
) -> Any:
    """(a·x lanes 0-3, b·x lanes 0-3, x·x lanes 0-3, valid, no_zeros) over x[:m], m a multiple
    of 4.

    Lane l is Σ a[j]·x[j] over j ≡ l (mod 4), j < m, in increasing j (the scalar partial sum
    s_l of :func:`learning._kernels.row_scores`); likewise for b and for x itself. The caller
    guarantees that a, b and x hold at least m elements; a strided array (a view) is read
    element by element into the same lanes. ``valid``: every |x_j| ≤ ``limit`` (an ordered
    comparison, so a NaN fails it, and so does an infinity when ``limit`` is finite).
    ``no_zeros``: every x_j ≠ 0.
    """
    from llvmlite import ir  # type: ignore[import-untyped]  # noqa: PLC0415 - numba on first use
    from numba.core import cgutils, types  # noqa: PLC0415 - numba on first use

    arrays = (a, b, x)
    if not all(isinstance(t, types.Array) and t.ndim == 1 for t in arrays):
        return None
    if any(t.dtype != types.float64 for t in arrays):
        return None
    result = types.Tuple([types.float64] * (SUMS * LANES) + [types.boolean] * FLAGS)  # type: ignore[no-untyped-call]
    signature = result(a, b, x, types.intp, types.float64)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        double = ir.DoubleType()
        vector = ir.VectorType(double, LANES)
        flags = ir.VectorType(ir.IntType(1), LANES)
        index = ir.IntType(64)
        fabs = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
            builder.module, ir.FunctionType(vector, [vector]), "llvm.fabs.v4f64"
        )
        rows = [context.make_array(sig.args[i])(context, builder, args[i]) for i in range(3)]

        def load(which: int, position: Any) -> Any:
            """Elements 4·position .. 4·position + 3 of array ``which``, as one vector."""
            if sig.args[which].is_contig:
                pointer = builder.bitcast(rows[which].data, vector.as_pointer())
                return builder.load(builder.gep(pointer, [position]), align=ELEMENT_ALIGNMENT)
            # A strided row (a view): its four elements one by one, into the same lanes.
            stride = builder.extract_value(rows[which].strides, 0)
            base = builder.bitcast(rows[which].data, ir.IntType(8).as_pointer())
            first = builder.mul(position, ir.Constant(index, LANES))
            lanes = ir.Constant(vector, None)
            for lane in range(LANES):
                element = builder.add(first, ir.Constant(index, lane))
                address = builder.gep(base, [builder.mul(element, stride)])
                value = builder.load(builder.bitcast(address, double.as_pointer()))
                lanes = builder.insert_element(lanes, value, ir.Constant(index, lane))
            return lanes

        count = args[3]
        bound = builder.insert_element(ir.Constant(vector, None), args[4], ir.Constant(index, 0))
        broadcast = ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES)
        bound = builder.shuffle_vector(bound, ir.Constant(vector, None), broadcast)
        zero = ir.Constant(vector, [0.0] * LANES)
        all_true = ir.Constant(flags, [1] * LANES)
        entry = builder.block
        header = builder.append_basic_block("lanes.header")
        body = builder.append_basic_block("lanes.body")
        done = builder.append_basic_block("lanes.done")
        vectors = builder.sdiv(count, ir.Constant(index, LANES))
        builder.branch(header)
        builder.position_at_end(header)
        position = builder.phi(index)
        s = builder.phi(vector)
        t = builder.phi(vector)
        q = builder.phi(vector)
        ok = builder.phi(flags)
        filled = builder.phi(flags)
        position.add_incoming(ir.Constant(index, 0), entry)
        s.add_incoming(zero, entry)
        t.add_incoming(zero, entry)
        q.add_incoming(zero, entry)
        ok.add_incoming(all_true, entry)
        filled.add_incoming(all_true, entry)
        builder.cbranch(builder.icmp_signed("<", position, vectors), body, done)
        builder.position_at_end(body)
        va = load(0, position)
        vb = load(1, position)
        vx = load(2, position)
        s_next = builder.fadd(s, builder.fmul(va, vx))
        t_next = builder.fadd(t, builder.fmul(vb, vx))
        q_next = builder.fadd(q, builder.fmul(vx, vx))
        ok_next = builder.and_(ok, builder.fcmp_ordered("<=", builder.call(fabs, [vx]), bound))
        filled_next = builder.and_(filled, builder.fcmp_unordered("!=", vx, zero))
        position.add_incoming(builder.add(position, ir.Constant(index, 1)), body)
        s.add_incoming(s_next, body)
        t.add_incoming(t_next, body)
        q.add_incoming(q_next, body)
        ok.add_incoming(ok_next, body)
        filled.add_incoming(filled_next, body)
        builder.branch(header)
        builder.position_at_end(done)
        sums = [
            builder.extract_element(v, ir.Constant(index, j))
            for v in (s, t, q)
            for j in range(LANES)
        ]

        def every(lanes: Any) -> Any:
            result = builder.extract_element(lanes, ir.Constant(index, 0))
            for j in range(1, LANES):
                result = builder.and_(result, builder.extract_element(lanes, ir.Constant(index, j)))
            return result

        return context.make_tuple(builder, sig.return_type, [*sums, every(ok), every(filled)])

    return signature, codegen


lane_dots: Any = intrinsic(_lane_dots_intrinsic)
