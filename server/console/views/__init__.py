"""Every read of kernel state the console makes, in this package and nowhere else.

Each read is `async (kernel, space, ...) -> dict` and goes through `kernel.read(space, view)`:
`view` runs at once on the space's state (None when nothing was ever recorded there; a read never
makes a space), must change nothing, and its result is returned once everything it could see is
durable, so the console never shows a change that a crash could take back. The answers are plain
dicts and lists for the templates, each with `cursor`: the number of the newest event the read
saw, from which the page's live stream resumes (no gap between what the page shows and what the
stream brings).

The shared reads of `actors/` (`reads.py`, `capacity_reads.py`, `coordination_reads.py`) take a
kernel and look the space up themselves (`space_view`); inside a read they are given `_Reading`
(`reading.py`), which answers that lookup with the space the view was given. The tables' own
`view` methods make the rows, so a console row and an API answer say the same thing in the same
words.

Lists are paged by cursor with a cap (`PAGE_MAX`): a cursor is the sort key of the last row shown,
so a page is the same whatever was added or removed before it. The event log is scanned in order
(`EventLog.scan`), never indexed row by row.

- `reading.py`: the read itself, keys, cursors and pages, what every page shares;
- `lists.py`: runs, claims, tasks, queues, capacity, coordination, events, the space;
- `swimlanes.py`: the lease swimlanes;
- `search.py`: runs, claim keys, holders, task keys and mailboxes matching a text;
- `waiting.py`: "why is it waiting?", one check per constraint, in the order the kernel decides
  them (`actors/admission.py`, `actors/pools.py`, `actors/quotas.py`);
- `losses.py`: the workers, and what a holder's crash took down, from the events naming it.
"""

from .lists import capacity, claims, coordination, events, queue, queues, run, runs, space_overview, task, tasks
from .losses import worker, workers
from .reading import PAGE_DEFAULT, PAGE_MAX, events_after, key_access, key_named, key_spaces, known_spaces, newest_event
from . import swimlanes
from .swimlanes import lanes
from .search import search
from .waiting import why_claim, why_task, why_waiter

__all__ = [
    "PAGE_DEFAULT", "PAGE_MAX", "swimlanes", "known_spaces", "newest_event", "runs", "run", "claims", "lanes", "tasks", "task",
    "queues", "queue", "capacity", "coordination", "events", "workers", "worker", "why_task", "why_waiter", "why_claim",
    "space_overview", "search", "events_after", "key_spaces", "key_access", "key_named",
]
