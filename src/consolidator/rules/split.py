"""How a claim becomes batches: each batch the longest prefix of what is left whose message fits
the byte cap (counted as the sink counts a body, with every optional field the message may
carry) and whose sums stay within their bounds (int64, finite doubles).

Both engines split a claim with :func:`split_to_fit` (the Lambda path's claim reads its rows a
page at a time through :func:`fit_count`), so they produce the same batches. The message itself
is :func:`consolidator.rules.batch.build_message`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from consolidator.rules.batch import (
    Member,
    build_message,
    encode,
    newest_per_item,
    pairs_of,
    view_of,
)
from consolidator.rules.events import MAX_QUANTITY
from consolidator.rules.policy import FlushReason, Policy
from consolidator.rules.shape import INT64_MAX, REFERENCE_SHAPE, Shape, aggregate, within_bounds
from consolidator.rules.shape_bounds import bounds_safe
from consolidator.rules.tracecontext import TRACEPARENT_CHARS, TraceContext


@dataclass(frozen=True, slots=True)
class MessageOptions:
    """What, besides its members, decides a message's size: the event shape (the reference: version 1),
    completion tracking (item ids and the ack token) and a rate limit (``held_back_ms``). The
    byte cap is applied to the message with every optional field these allow, at its widest,
    counted as the sink counts a body (``measure``: the policy's ``measure_body``; the encoded
    bytes as they are, or as the sink writes them)."""

    shape: Shape = REFERENCE_SHAPE
    tracked: bool = False
    rate_limited: bool = False
    measure: Callable[[bytes], int] = len

    @classmethod
    def of(cls, policy: Policy, tracked: bool = False, rate_limited: bool = False, *,
           shape: Shape = REFERENCE_SHAPE) -> MessageOptions:
        """The options of ``policy``'s messages of event shape ``shape`` (the field names'):
        how its sink counts a body."""
        return cls(shape, tracked, rate_limited, policy.measure_body)


PLAIN = MessageOptions()
_SIZING_KEY = b"\x00" * 16  # any key: an ack token is always 32 hex digits
_SIZING_TRACE = (TraceContext("00-" + "1" * 32 + "-" + "1" * 16 + "-01"),)  # a traceparent: always 55 characters



def message_bytes(group_key: str, members: Sequence[Member], reason: FlushReason, flushed_at_ms: int,
                  options: MessageOptions = PLAIN) -> int:
    """Size of the encoded message of these members with every field ``options`` allow, at its
    widest, as the sink counts it (``options.measure``): the published message is never larger
    (the ack token and the ``traceparent`` have fixed lengths, the held-back time is counted with
    the most digits it can have). The ``traceparent`` is always counted: whether members have
    trace contexts is known only at publish, and every engine splits a claim alike."""
    return options.measure(encode(build_message(
        group_key, members, reason, flushed_at_ms, shape=options.shape,
        ack_key=_SIZING_KEY if options.tracked else None, held_back_ms=INT64_MAX if options.rate_limited else 0,
        trace_contexts=_SIZING_TRACE)))


def message_bytes_bound(group_key: str, members: Sequence[Member], options: MessageOptions = PLAIN) -> int:
    """An upper bound of :func:`message_bytes`, without building the message: every string
    counted as if each character were a 6-byte JSON escape (the most any sink writes for one:
    the SQS sink's escapes are 6 bytes too), every number at its widest. A generic shape has
    no cheap bound (its members carry events): the bound is then infinite."""
    if not options.shape.is_reference:
        return 1 << 62
    size = 512 + 6 * len(group_key) + 64 + TRACEPARENT_CHARS  # fixed fields, keys, ids, times, counts, trace
    size += 160 if options.tracked or options.rate_limited else 0  # ack token, flags, held-back time
    for m in members:
        size += (12 if options.tracked else 6) * len(m.item_id) + 3 + 6 * len(m.position.topic) + 96
        size += sum(6 * len(sku) + 64 for sku, _ in pairs_of(m.items))
    return size


def fit_count(fits: Callable[[int], bool], have: Callable[[int], int]) -> int:
    """How many members the next batch takes, given ``fits(m)`` (a message of the first ``m``
    members is within the cap) and ``have(m)`` (how many of the first ``m`` members exist:
    ``min(m, n)``; a reader may fetch them when asked). At least 1 when ``have(1)`` is 1.

    Prefixes of 1, 2, 4, ... members are tried until one does not fit or no more members
    exist, then the boundary is found by bisection between the last prefix that fitted and the
    first that did not. The answer depends on the first ``2k`` members only (``k`` the answer),
    never on how many come after: a reader that reads pages on demand gets the same batches as
    a caller holding the whole claim, and reads at most twice the members the batch takes."""
    if have(1) < 1:
        return 0
    fits_up_to, probe = 1, 2
    while True:
        available = have(probe)
        if available <= fits_up_to:
            return fits_up_to  # every member there is fits
        if not fits(available):
            too_big = available
            break
        fits_up_to = available
        if available < probe:
            return fits_up_to
        probe *= 2
    while too_big - fits_up_to > 1:  # invariant: fits_up_to fits, too_big does not
        middle = (fits_up_to + too_big) // 2
        if fits(middle):
            fits_up_to = middle
        else:
            too_big = middle
    return fits_up_to


def prefix_fits(group_key: str, members: Sequence[Member], reason: FlushReason, flushed_at_ms: int,
                max_bytes: int, options: MessageOptions = PLAIN) -> Callable[[int], bool]:
    """``fits(m)`` for :func:`fit_count`: the message of ``members[:m]`` is at most ``max_bytes``
    (decided by :func:`message_bytes_bound` when that suffices, without building the message)."""
    def fits(m: int) -> bool:
        prefix = members[:m]
        return (message_bytes_bound(group_key, prefix, options) <= max_bytes
                or message_bytes(group_key, prefix, reason, flushed_at_ms, options) <= max_bytes)
    return fits


def bounded_prefix(members: Sequence[Member], shape: Shape = REFERENCE_SHAPE) -> int:
    """How many of ``members`` (claim order) the next batch takes before a quantity it sums
    would pass ``MAX_QUANTITY`` (2**63-1): members are taken one by one, as
    :func:`build_message` counts them (the newest row of each item), and the first that would
    take a sku's sum over the bound starts the next batch. At least 1: ingest refuses an event
    whose own sums go over, so a member alone always fits. Cheap when the quantities of all
    members together fit (always, unless quantities reach 10**18 or so). A generic ``shape``:
    the longest prefix (:func:`fit_count`) whose outputs all stay within bounds
    (:func:`~consolidator.rules.shape.within_bounds`: integers within int64, doubles finite)."""
    if not shape.is_reference:
        if bounds_safe(shape, [view_of(x.items).event for x in members]):
            return len(members)  # every prefix fits (shape_bounds): what probing gives, without it
        return fit_count(lambda m: within_bounds(aggregate(shape, [
            view_of(x.items).event for x in sorted(newest_per_item(members[:m]).values(), key=lambda x: x.position)])),
            lambda m: min(m, len(members)))
    if sum([quantity for m in members for _, quantity in pairs_of(m.items)]) <= MAX_QUANTITY:
        return len(members)
    newest: dict[str, Member] = {}
    sums: dict[str, int] = {}
    for index, member in enumerate(members):
        current = newest.get(member.item_id)
        if current is not None and member.position < current.position:
            continue  # an older row of an item already taken: the sums do not change
        change: dict[str, int] = {}
        for sku, quantity in () if current is None else pairs_of(current.items):
            change[sku] = change.get(sku, sums.get(sku, 0)) - quantity
        for sku, quantity in pairs_of(member.items):
            change[sku] = change.get(sku, sums.get(sku, 0)) + quantity
        if any(total > MAX_QUANTITY for total in change.values()):
            return max(index, 1)
        sums.update(change)
        newest[member.item_id] = member
    return len(members)


def fitting_prefix(
    group_key: str, members: Sequence[Member], reason: FlushReason, flushed_at_ms: int, max_bytes: int | None,
    options: MessageOptions = PLAIN,
) -> int:
    """How many of ``members`` (claim order) the next batch takes: under the byte cap (``None``:
    no cap) :func:`fit_count` over them, at least 1 (a member too large on its own is a batch of
    its own; the sink rejects it and, after ``max_attempts``, it reaches the dead-letter
    destination), then of that prefix :func:`bounded_prefix` (its integer sums fit a signed
    64-bit integer, its double sums are finite), in this order, as the Lambda path's claim
    (``store/claims.py``): sums may leave int64 and come back (negative values), so the bounded
    prefix of the whole claim, cut by the byte cap afterwards, could sum past it. While a message grows with its prefix
    (always, except where a later member of an item replaces an earlier one with fewer SKUs)
    this is the longest prefix that fits."""
    taken = len(members) if max_bytes is None else fit_count(
        prefix_fits(group_key, members, reason, flushed_at_ms, max_bytes, options), lambda m: min(m, len(members)))
    return bounded_prefix(members[:taken], options.shape) if taken else 0


def split_to_fit(
    group_key: str, members: Sequence[Member], reason: FlushReason, flushed_at_ms: int, max_bytes: int | None,
    options: MessageOptions = PLAIN,
) -> list[list[Member]]:
    """One claim's members as consecutive batches, each :func:`fitting_prefix` of what is left.
    Both engines split a claim with this rule, so they produce the same batches."""
    rest = list(members)
    batches = []
    while rest:
        taken = fitting_prefix(group_key, rest, reason, flushed_at_ms, max_bytes, options)
        batches.append(rest[:taken])
        rest = rest[taken:]
    return batches


def fit_claims(
    group_key: str, claims: Sequence[tuple[FlushReason, Sequence[Member]]], flushed_at_ms: int, policy: Policy,
    tracked: bool = False, *, shape: Shape = REFERENCE_SHAPE,
) -> list[tuple[FlushReason, list[Member]]]:
    """:func:`~consolidator.rules.policy.plan_batches` claims split under ``policy.max_batch_bytes`` and
    so that their sums stay within bounds (:func:`fitting_prefix`), the size counted as
    ``policy.measure_body`` counts a body, with the event shape ``shape``, ``held_back_ms`` when the
    group has a rate limit, and the tracking fields."""
    options = MessageOptions.of(policy, tracked, policy.limit_for(group_key) is not None, shape=shape)
    return [(reason, batch) for reason, members in claims
            for batch in split_to_fit(group_key, members, reason, flushed_at_ms, policy.max_batch_bytes, options)]
