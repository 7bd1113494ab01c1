"""What a route's handler is handed as `services`, typed: the live `Runtime`, or a stand-in.

A read of a space runs the same handler live and at a past point: `routes/history.py` hands it a
`_Past` (the runtime's services with the kernel of the point), and `history_views.read_route` (the
offline replay, a diff's replay thread) a `_Reader` (the kernel of the point and nothing else).
So a read handler takes `ReadServices`, which all three give, and reads the kernel through
`RouteKernel`, which the live `Kernel` and the past one (`history.PastKernel`) both are.

`services.kernel` is never None for a handler: the runtime's `kernel` refuses with 503 until the
state is open (`Runtime.kernel`), and a stand-in holds the kernel of its point. Code that runs
before that (health, metrics, shutdown) reads `Runtime.kernel_if_open` instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterator, Protocol, TypeVar

from ..actors.kernel_reads import KernelReads

if TYPE_CHECKING:
    from ..actors.commands import Command
    from ..actors.kernel import Kernel
    from ..actors.keys import KeyTable
    from ..actors.limits import Limits
    from ..actors.partition import Idem
    from ..actors.shapes import Body
    from ..actors.space import SpaceState
    from .history import PastKernel
    from .http import Request
    from .runtime import Runtime

__all__ = ["RouteKernel", "ReadServices"]

T = TypeVar("T")


class RouteKernel(KernelReads, Protocol):
    """What a read route's handler asks of a kernel: the reads (`KernelReads`), the keys and
    limits, a command's parameters parsed, and a wait (a long poll) submitted.

    A past point answers a wait at once with nothing (`PastKernel.submit`), as a wait nothing
    ended does."""

    @property
    def limits(self) -> Limits: ...

    @property
    def keys(self) -> KeyTable: ...

    def spaces(self) -> Iterator[SpaceState]: ...

    def space_known(self, space_id: str) -> bool: ...

    async def read(self, space_id: str, view: Callable[[SpaceState | None], T]) -> T: ...

    async def settled(self, space_id: str | None = None) -> None: ...

    # `Any`: the command parsed is of `command_class`, which each route names.
    def parse(
        self, command_class: type, body: Body, params: dict[str, str], query: Callable[[str], str | None] | None = None,
    ) -> Any: ...

    # `Any`: each command has its own reply (or `EMPTY`, a wait that ended with nothing).
    def submit(self, command: Command, *, idem: Idem | None = None, wait_ms: int | None = None) -> Awaitable[Any]: ...


class ReadServices(Protocol):
    """What a read route's handler asks of `services` (see the module docstring)."""

    @property
    def kernel(self) -> RouteKernel: ...

    @property
    def limits(self) -> Limits: ...

    def authorize(self, request: Request, space: str, *, operator: bool = False) -> str: ...


if TYPE_CHECKING:  # what the type checker proves: the live parts and a past point's give what the handlers ask

    def _live_kernel(kernel: Kernel) -> RouteKernel:
        return kernel

    def _past_kernel(kernel: PastKernel) -> RouteKernel:
        return kernel

    def _live_services(runtime: Runtime) -> ReadServices:
        return runtime
