"""Vector column sweep for the inter-sequence CPU kernels, written in LLVM IR.

Numba widens every small-integer expression to 64 bits, which keeps LLVM from packing
16-bit cells into one AVX2 register (a plain ``@njit`` loop over int16 lanes measured
0.9 GCUPS on one Zen 3 core; with casts after every operation 2.3).  The sweep here is
emitted as ``<lanes x iN>`` vector IR through :func:`numba.extending.intrinsic`, so the
loop body is a handful of ``vpaddsw``/``vpsubsw``/``vpmaxsw`` per cell vector on any CPU
LLVM targets (SSE2, AVX2, AVX-512, NEON).

Three widths, one 256-bit register (AVX2) of cells each:

- ``uint8``, 32 lanes, local scores only: unsigned saturating arithmetic with the
  profile biased by ``-min(matrix)`` (Farrar's and parasail's 8-bit trick); values
  below zero clamp at zero, which is exactly Smith-Waterman's floor;
- ``int16``, 16 lanes, and ``int32``, 8 lanes: signed saturating arithmetic.

A score that may have saturated (the 8-bit lanes reaching ``255 - bias``, the 16-bit
ones reaching 32,767) is detected by the caller and recomputed exactly in the next
width.  A score is never silently capped.
"""
from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic


def _vector_fn(builder, name, vty, nargs=2):
    fnty = ir.FunctionType(vty, [vty] * nargs)
    return cgutils.get_or_insert_function(builder.module, fnty, f"{name}.v{vty.count}i{vty.element.width}")


#: Lanes per vector for each score width: one 256-bit register (AVX2) of cells.
LANES = {8: 32, 16: 16, 32: 8}
_ELEMENTS = {types.uint8: 8, types.int16: 16, types.int32: 32}


def _sentinel(bits):
    """A value no H of that width takes: marks lanes that :func:`first_rows` skips."""
    return (1 << 8) - 1 if bits == 8 else -(1 << (bits - 1))


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
    floor, out)``; the score width (uint8 with 32 lanes, int16 with 16, int32 with 8)
    follows the arrays' dtype:

    - ``query``: uint8[m], the query codes (the rows);
    - ``profile``: int{bits}[alphabet, lanes], the substitution score of each code
      against the current residue of each lane (a "subject profile" column);
    - ``hcol``, ``ecol``: int{bits}[m, lanes], H and E of the previous column on entry,
      of this column on exit (E is the gap along the subject, 'D');
    - ``hdiag0``, ``hup0``: H of row 0 in the previous and this column (scalars);
    - ``gap_oe``, ``gap_e``: ``gap_open + gap_extend`` and ``gap_extend``;
    - ``floor``: H never goes below it: 0 for Smith-Waterman, the type's minimum else;
      for uint8 lanes it is instead the bias added to every profile score (the floor
      is then 0);
    - ``out``: int{bits}[2, lanes]; row 0 receives the column maximum over rows 1..m
      (at least the floor), row 1 the H of row m.
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
            unsigned = bits == 8
            smax = _vector_fn(builder, "llvm.umax" if unsigned else "llvm.smax", vty)
            adds = _vector_fn(builder, "llvm.uadd.sat" if unsigned else "llvm.sadd.sat", vty)
            subs = _vector_fn(builder, "llvm.usub.sat" if unsigned else "llvm.ssub.sat", vty)
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
            zero = ir.Constant(vty, [0] * lanes)
            lowest = zero if unsigned else ir.Constant(vty, [-(1 << (bits - 1))] * lanes)

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
            cmax = cgutils.alloca_once_value(builder, zero if unsigned else vfloor)
            with cgutils.for_range(builder, m) as loop:
                i = loop.index
                code = builder.zext(builder.load(builder.gep(qptr, [i])), intp)
                prof = load_row(pptr, code)
                h_left = load_row(hptr, i)
                e = builder.call(smax, [builder.call(subs, [load_row(eptr, i), ve]),
                                        builder.call(subs, [h_left, voe])])
                f = builder.call(smax, [builder.call(subs, [builder.load(fgap), ve]),
                                        builder.call(subs, [builder.load(hup), voe])])
                diag = builder.call(adds, [builder.load(hdiag), prof])
                if unsigned:  # remove the bias; below zero clamps at the floor, zero
                    diag = builder.call(subs, [diag, vfloor])
                h = builder.call(smax, [diag, builder.call(smax, [e, f])])
                if not unsigned:
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
    ``target[k]`` is not the width's sentinel (:func:`_sentinel`), the first row ``i`` with
    ``hcol[i, k] == target[k]`` (``m`` when there is none); other lanes are not searched.

    ``hcol`` and ``target`` hold uint8, int16 or int32; ``out`` is int32[lanes].  One pass of vector
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
            sentinel = ir.Constant(vty, [_sentinel(bits)] * lanes)
            skip = builder.icmp_unsigned("==", want, sentinel)  # lanes not searched count as done
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


def host_has_avx2() -> bool:
    """Whether the CPU Numba compiles for has AVX2 (``vpshufb`` on 256-bit registers)."""
    import llvmlite.binding as llvm

    return "+avx2" in llvm.get_host_cpu_features().flatten().split(",")


#: Profile columns are built with byte shuffles where the CPU has them.
HAS_AVX2 = host_has_avx2()


def _make_profile_u8():
    """Build the intrinsic ``profile_u8(tables, codes, out)`` for 32 uint8 lanes (AVX2).

    ``tables``: uint8[alphabet, 32], row ``a`` holding the biased score of code ``a``
    against each code ``c`` (entries past the alphabet hold the pad score); ``codes``:
    uint8[32], the residue code of each lane in this column (< 32); ``out``:
    uint8[alphabet, 32] receives ``tables[a, codes[k]]``.  Two in-register 16-entry
    lookups (``vpshufb``) and a blend per row replace 32 scalar loads and stores.

    On a CPU without AVX2, or for arrays of another dtype, it compiles to nothing: the
    score kernel then builds the profile with scalar code and never calls it (Numba
    types both sides of that branch, so the call must type-check everywhere).
    """

    @intrinsic
    def profile_u8(typingctx, tables, codes, out):
        for arr in (tables, codes, out):
            if not isinstance(arr, types.Array) or arr.layout != "C":
                return None
        sig = types.void(tables, codes, out)
        usable = HAS_AVX2 and all(arr.dtype == types.uint8 for arr in (tables, codes, out))

        def nothing(context, builder, signature, args):
            return context.get_dummy_value()

        def codegen(context, builder, signature, args):
            i8 = ir.IntType(8)
            vty = ir.VectorType(i8, 32)
            i32 = ir.IntType(32)
            intp = context.get_value_type(types.intp)
            shuffle = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vty, [vty, vty]), "llvm.x86.avx2.pshuf.b")

            def data(k):
                return cgutils.create_struct_proxy(signature.args[k])(context, builder, value=args[k])

            table = data(0)
            rows = builder.extract_value(table.shape, 0)
            lane_codes = builder.load(builder.bitcast(data(1).data, vty.as_pointer()), align=1)
            low_half = builder.icmp_unsigned("<", lane_codes, ir.Constant(vty, [16] * 32))
            lo_mask = ir.Constant(ir.VectorType(i32, 32), list(range(16)) * 2)
            hi_mask = ir.Constant(ir.VectorType(i32, 32), list(range(16, 32)) * 2)
            optr = data(2).data
            with cgutils.for_range(builder, rows) as loop:
                offset = builder.mul(loop.index, ir.Constant(intp, 32))
                row = builder.load(builder.bitcast(builder.gep(table.data, [offset]), vty.as_pointer()),
                                   align=1)
                lo = builder.shuffle_vector(row, ir.Constant(vty, ir.Undefined), lo_mask)
                hi = builder.shuffle_vector(row, ir.Constant(vty, ir.Undefined), hi_mask)
                picked = builder.select(low_half, builder.call(shuffle, [lo, lane_codes]),
                                        builder.call(shuffle, [hi, lane_codes]))
                builder.store(picked, builder.bitcast(builder.gep(optr, [offset]), vty.as_pointer()),
                              align=1)
            return context.get_dummy_value()

        return sig, (codegen if usable else nothing)

    return profile_u8


profile_u8 = _make_profile_u8()


def _make_next_index():
    """Build the intrinsic ``next_index(counter)``: atomically add 1 to ``counter[0]``
    (int64) and return its previous value.

    Threads that share ``counter`` take work items one at a time without the GIL or a
    lock: dynamic scheduling for a ``nogil`` kernel that several Python threads run at
    once (Numba offers no atomics on the CPU).
    """

    @intrinsic
    def next_index(typingctx, counter):
        if not isinstance(counter, types.Array) or counter.dtype != types.int64:
            return None
        sig = types.int64(counter)

        def codegen(context, builder, signature, args):
            arr = cgutils.create_struct_proxy(signature.args[0])(context, builder, value=args[0])
            return builder.atomic_rmw("add", arr.data, ir.Constant(ir.IntType(64), 1),
                                      "monotonic")

        return sig, codegen

    return next_index


next_index = _make_next_index()
