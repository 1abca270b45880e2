"""Vector column sweep for the inter-sequence CPU kernels, written in LLVM IR.

Numba widens every small-integer expression to 64 bits, which keeps LLVM from packing
16-bit cells into one AVX2 register (a plain ``@njit`` loop over int16 lanes measured
0.9 GCUPS on one Zen 3 core; with casts after every operation 2.3).  The sweep here is
emitted as ``<lanes x iN>`` vector IR through :func:`numba.extending.intrinsic`, so the
loop body is a handful of ``vpaddsw``/``vpsubsw``/``vpmaxsw`` per cell vector on any CPU
LLVM targets (SSE2, AVX2, AVX-512, NEON).

Arithmetic saturates (``llvm.sadd.sat``/``llvm.ssub.sat``): a local score that would
overflow 16 bits sticks at the type's maximum, which the caller detects and recomputes
exactly in 32 bits.  A score is never silently capped.
"""
from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic


def _vector_fn(builder, name, vty, nargs=2):
    fnty = ir.FunctionType(vty, [vty] * nargs)
    return cgutils.get_or_insert_function(builder.module, fnty, f"{name}.v{vty.count}i{vty.element.width}")


#: Lanes per vector for each score width: one 256-bit register (AVX2) of cells.
LANES = {16: 16, 32: 8}
_ELEMENTS = {types.int16: 16, types.int32: 32}


def _check_arrays(*arrays):
    """The score width shared by the arrays, or None (no match: Numba reports the types)."""
    widths = set()
    for arr in arrays:
        if not isinstance(arr, types.Array) or arr.dtype not in _ELEMENTS or arr.layout != "C":
            return None
        widths.add(_ELEMENTS[arr.dtype])
    return widths.pop() if len(widths) == 1 else None


def _make_column_sweep():
    """Build the intrinsic that sweeps one DP column for a vector of subjects at once.

    Signature ``column_sweep(query, profile, hcol, ecol, hdiag0, hup0, gap_oe, gap_e,
    floor, out)``; the score width (int16 with 16 lanes or int32 with 8) follows the
    arrays' dtype:

    - ``query``: uint8[m], the query codes (the rows);
    - ``profile``: int{bits}[alphabet, lanes], the substitution score of each code
      against the current residue of each lane (a "subject profile" column);
    - ``hcol``, ``ecol``: int{bits}[m, lanes], H and E of the previous column on entry,
      of this column on exit (E is the gap along the subject, 'D');
    - ``hdiag0``, ``hup0``: H of row 0 in the previous and this column (scalars);
    - ``gap_oe``, ``gap_e``: ``gap_open + gap_extend`` and ``gap_extend``;
    - ``floor``: H never goes below it: 0 for Smith-Waterman, the type's minimum else;
    - ``out``: int{bits}[2, lanes]; row 0 receives the column maximum over rows 1..m
      (at least ``floor``), row 1 the H of row m.
    """

    @intrinsic
    def column_sweep(typingctx, query, profile, hcol, ecol, hdiag0, hup0, gap_oe, gap_e, floor, out):
        bits = _check_arrays(profile, hcol, ecol, out)
        if bits is None:
            return None
        lanes = LANES[bits]
        elem = profile.dtype
        sig = types.void(query, profile, hcol, ecol, hdiag0, hup0, gap_oe, gap_e, floor, out)

        def codegen(context, builder, signature, args):
            ity = ir.IntType(bits)
            vty = ir.VectorType(ity, lanes)
            vptr = vty.as_pointer()
            smax = _vector_fn(builder, "llvm.smax", vty)
            adds = _vector_fn(builder, "llvm.sadd.sat", vty)
            subs = _vector_fn(builder, "llvm.ssub.sat", vty)
            intp = context.get_value_type(types.intp)

            def data(k):
                return cgutils.create_struct_proxy(signature.args[k])(context, builder, value=args[k])

            q = data(0)
            qptr = q.data
            m = builder.extract_value(q.shape, 0)
            pptr, hptr, eptr, optr = data(1).data, data(2).data, data(3).data, data(9).data

            def splat(value, from_type):
                scalar = context.cast(builder, value, from_type, elem)
                vec = ir.Constant(vty, ir.Undefined)
                for k in range(lanes):
                    vec = builder.insert_element(vec, scalar, ir.Constant(ir.IntType(32), k))
                return vec

            voe = splat(args[6], signature.args[6])
            ve = splat(args[7], signature.args[7])
            vfloor = splat(args[8], signature.args[8])
            lowest = ir.Constant(vty, [-(1 << (bits - 1))] * lanes)

            def load_row(base, row):
                ptr = builder.gep(base, [builder.mul(row, ir.Constant(intp, lanes))])
                return builder.load(builder.bitcast(ptr, vptr), align=bits // 8)

            def store_row(value, base, row):
                ptr = builder.gep(base, [builder.mul(row, ir.Constant(intp, lanes))])
                builder.store(value, builder.bitcast(ptr, vptr), align=bits // 8)

            # Loop-carried vectors live in allocas that LLVM promotes to registers.
            hdiag = cgutils.alloca_once_value(builder, splat(args[4], signature.args[4]))
            hup = cgutils.alloca_once_value(builder, splat(args[5], signature.args[5]))
            fgap = cgutils.alloca_once_value(builder, lowest)
            cmax = cgutils.alloca_once_value(builder, vfloor)
            with cgutils.for_range(builder, m) as loop:
                i = loop.index
                code = builder.zext(builder.load(builder.gep(qptr, [i])), intp)
                prof = load_row(pptr, code)
                h_left = load_row(hptr, i)
                e = builder.call(smax, [builder.call(subs, [load_row(eptr, i), ve]),
                                        builder.call(subs, [h_left, voe])])
                f = builder.call(smax, [builder.call(subs, [builder.load(fgap), ve]),
                                        builder.call(subs, [builder.load(hup), voe])])
                h = builder.call(smax, [builder.call(adds, [builder.load(hdiag), prof]),
                                        builder.call(smax, [e, f])])
                h = builder.call(smax, [h, vfloor])
                store_row(h, hptr, i)
                store_row(e, eptr, i)
                builder.store(h_left, hdiag)
                builder.store(h, hup)
                builder.store(f, fgap)
                builder.store(builder.call(smax, [builder.load(cmax), h]), cmax)
            store_row(builder.load(cmax), optr, ir.Constant(intp, 0))
            store_row(builder.load(hup), optr, ir.Constant(intp, 1))
            return context.get_dummy_value()

        return sig, codegen

    return column_sweep


column_sweep = _make_column_sweep()


def _make_first_rows():
    """Build the intrinsic ``first_rows(hcol, target, out)``: for every lane ``k`` whose
    ``target[k]`` is not the type's minimum, the first row ``i`` with
    ``hcol[i, k] == target[k]`` (``m`` when there is none); other lanes are not searched.

    ``hcol`` and ``target`` hold int16 or int32; ``out`` is int32[lanes].  One pass of vector
    compares serves all lanes and stops as soon as every searched lane has its row; a
    scalar scan per improving lane made local end-finding quadratic on similar pairs.
    """
    @intrinsic
    def first_rows(typingctx, hcol, target, out):
        bits = _check_arrays(hcol, target)
        if bits is None or out.dtype != types.int32:
            return None
        lanes = LANES[bits]
        sig = types.void(hcol, target, out)

        def codegen(context, builder, signature, args):
            vty = ir.VectorType(ir.IntType(bits), lanes)
            ity = ir.VectorType(ir.IntType(32), lanes)
            bty = ir.VectorType(ir.IntType(1), lanes)
            mask_ty = ir.IntType(lanes)
            intp = context.get_value_type(types.intp)

            def data(k):
                return cgutils.create_struct_proxy(signature.args[k])(context, builder, value=args[k])

            h = data(0)
            m = builder.extract_value(h.shape, 0)
            want = builder.load(builder.bitcast(data(1).data, vty.as_pointer()), align=bits // 8)
            lowest = ir.Constant(vty, [-(1 << (bits - 1))] * lanes)
            skip = builder.icmp_signed("==", want, lowest)  # lanes not searched count as done
            start = builder.block
            header = builder.append_basic_block("first_rows.header")
            body = builder.append_basic_block("first_rows.body")
            done_bb = builder.append_basic_block("first_rows.exit")
            m_splat = _splat(builder, builder.trunc(m, ir.IntType(32)), lanes)
            builder.branch(header)

            builder.position_at_end(header)
            i = builder.phi(intp)
            first = builder.phi(ity)
            done = builder.phi(bty)
            i.add_incoming(ir.Constant(intp, 0), start)
            first.add_incoming(m_splat, start)
            done.add_incoming(skip, start)
            all_done = builder.icmp_unsigned("==", builder.bitcast(done, mask_ty),
                                             ir.Constant(mask_ty, (1 << lanes) - 1))
            more = builder.and_(builder.not_(all_done), builder.icmp_signed("<", i, m))
            builder.cbranch(more, body, done_bb)

            builder.position_at_end(body)
            ptr = builder.gep(h.data, [builder.mul(i, ir.Constant(intp, lanes))])
            row = builder.load(builder.bitcast(ptr, vty.as_pointer()), align=bits // 8)
            hit = builder.icmp_signed("==", row, want)
            new = builder.and_(hit, builder.not_(done))
            row_index = _splat(builder, builder.trunc(i, ir.IntType(32)), lanes)
            first.add_incoming(builder.select(new, row_index, first), body)
            done.add_incoming(builder.or_(done, hit), body)
            i.add_incoming(builder.add(i, ir.Constant(intp, 1)), body)
            builder.branch(header)

            builder.position_at_end(done_bb)
            builder.store(first, builder.bitcast(data(2).data, ity.as_pointer()), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return first_rows


first_rows = _make_first_rows()


def _splat(builder, scalar, lanes):
    vec = ir.Constant(ir.VectorType(scalar.type, lanes), ir.Undefined)
    for k in range(lanes):
        vec = builder.insert_element(vec, scalar, ir.Constant(ir.IntType(32), k))
    return vec
