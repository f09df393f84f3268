"""Queue partitions (K3): which of P partitions a carrier goes to, and the ids that name it.

The task stream, its dead-letter queue and its delay queue are split into ``partitions``
(P) partitions; every carrier of one execution lands on the same one, so one execution's
carriers keep their order. The partition is a stable hash of the execution id (CRC-32, the
same on every process and Python version — never ``hash()``, which is salted per process).

A message id the queue hands out names its partition without changing its shape: the
``<ms>-<seq>`` of the partition's stream becomes ``<ms>-<seq * P + k>``. With P = 1 that is
the stream id itself; with more, the millisecond part (the carrier's age, W14) is untouched
and ``seq mod P`` is the partition.
"""

from __future__ import annotations

import zlib

from plaita.domain.errors import PlaitaError

DEFAULT_PARTITIONS = 1
MAX_PARTITIONS = 1024


class PartitionCountChangedError(PlaitaError):
    """A worker started with another partition count than the deployment's while carriers
    still wait in the recorded layout: they would never be read again."""


def partition_change_refusal(
    queue_name: str, recorded: int, wanted: int, waiting: int
) -> PartitionCountChangedError:
    """The refusal of a change of ``--partitions`` from ``recorded`` to ``wanted``."""
    return PartitionCountChangedError(
        f"queue {queue_name!r} is laid out in {recorded} partition(s) and {waiting} carrier(s) "
        f"still wait there (pending, unread or delayed); --partitions {wanted} would leave "
        f"them unread. Start with --partitions {recorded} (PLAITA_PARTITIONS={recorded}), or "
        f"drain the queue with workers of --partitions {recorded} first (stop every producer, "
        "wait until the queue and its delay queue are empty), then start with "
        f"--partitions {wanted}"
    )


def check_partitions(partitions: int) -> int:
    """A partition count: a whole number from 1 to 1024; ``ValueError`` otherwise."""
    if (
        isinstance(partitions, bool)
        or not isinstance(partitions, int)
        or not 1 <= partitions <= MAX_PARTITIONS
    ):
        raise ValueError(
            f"a partition count must be a whole number from 1 to {MAX_PARTITIONS}, "
            f"got {partitions!r}"
        )
    return partitions


def partition_of(execution_id: str, partitions: int) -> int:
    """The partition (0 … P-1) of every carrier of ``execution_id``."""
    check_partitions(partitions)
    if partitions == 1:
        return 0
    return zlib.crc32(execution_id.encode("utf-8", errors="surrogatepass")) % partitions


def qualified_id(stream_id: str, partition: int, partitions: int) -> str:
    """The message id of entry ``stream_id`` (``<ms>-<seq>``) of stream ``partition``."""
    ms, _, seq = stream_id.partition("-")
    if partitions == 1:
        return stream_id
    return f"{ms}-{int(seq) * partitions + partition}"


def split_id(message_id: str, partitions: int) -> tuple[int, str] | None:
    """(partition, stream id) of a message id of ``qualified_id``; None when it is not one."""
    ms, dash, seq = message_id.partition("-")
    if not (dash and ms.isascii() and ms.isdigit() and seq.isascii() and seq.isdigit()):
        return None
    if partitions == 1:
        return 0, message_id
    number = int(seq)
    return number % partitions, f"{ms}-{number // partitions}"
