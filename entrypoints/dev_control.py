"""The control socket of ``plaita dev``: how a CLI command reaches a dev process (ADR 0021).

``plaita dev`` on the in-memory twin keeps every execution, flow and event in its own
memory, which no other process can open. So that the operator commands — ``plaita executions
start|show|wait|list``, ``plaita events publish``, ``plaita flows list|register`` … — work
against it unchanged, the dev process listens on a Unix socket in the directory it runs
from, ``.plaita/dev.sock``, and a command sent there (``plaita --dev``, or any command run in
that directory without a Redis URL) runs its own body — the same code, the same output, the
same ``--json`` and the same named errors as against Redis — with every use case it asks the
container for answered by the dev process's container.

The protocol, one connection per call:

1. hello, JSON both ways: the client's protocol number and plaita version; the server's, and
   its pid, console URL and store. Another version is refused here
   (``DevServerMismatchError``), before any value is exchanged.
2. the call, pickled: a provider of the container named in ``CLI_PROVIDERS``, its arguments,
   optionally a method of what it provides, the arguments and the caller's tenant.
3. answers, pickled: any number of callback frames (a callable argument — a bulk action's
   progress — stays in the CLI process and is called from there), then the return value or
   the named error the call raised, rebuilt as that error on the client.

Values travel as pickles, read back by an unpickler that builds only classes (never a
function) of plaita's own modules and of a few builtins. The socket is no network port: it
lives in a directory only its user may enter (0700), so what can connect is what could
already run code as that user; the restricted unpickler is a second guard, not the first.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import importlib
import importlib.metadata
import inspect
import io
import json
import logging
import os
import pickle
import stat
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import attrs

from plaita.application.actor import Actor, actor_scope, current_actor
from plaita.application.ports import Clock
from plaita.application.tenancy import current_tenant, no_tenant_scope, tenant_scope
from plaita.domain.errors import (
    DevServerError,
    DevServerMismatchError,
    DevServerRunningError,
    DevServerUnreachableError,
    PlaitaError,
    TenantContextMissingError,
)
from plaita.entrypoints.container import Container, system_clock

log = logging.getLogger("plaita.dev")

T = TypeVar("T")
JSON = Any

#: Where ``plaita dev`` listens, relative to the directory it runs from (and where a command
#: run in that directory looks first). Relative on purpose: a socket's path is limited to
#: about 100 bytes, a project's absolute path is not.
SOCKET_PATH = Path(".plaita") / "dev.sock"
#: Bumped whenever a frame's meaning changes; a client and a server of two protocols refuse.
PROTOCOL = 1
#: The largest frame either side reads: a result holds at most a page of executions or a
#: flow document (each at most 1 MiB as JSON); more is a broken peer, not a value.
MAX_FRAME_BYTES = 64 * 1024 * 1024
#: A peer that connects and sends nothing is dropped after this.
HELLO_TIMEOUT_SECONDS = 10.0

#: The container's providers a command may ask the dev process for: the operator use cases
#: and the stores the CLI reads. A command that needs another one adds it here (and to ADR
#: 0021's list); anything else — the worker, the queue's internals, the connections — is
#: the dev process's own and is refused by name.
CLI_PROVIDERS = frozenset(
    {
        "await_result",
        "bulk_action",
        "cancel_execution",
        "continue_execution",
        "controls",
        "create_schedule",
        "delete_execution",
        "delete_schedule",
        "events",
        "execution_history",
        "flow_registration",
        "flows",
        "hook_catalog",
        "get_execution",
        "list_dead_letters",
        "list_executions",
        "list_schedules",
        "list_tenants",
        "pause_execution",
        "pause_schedule",
        "publish_event",
        "reap_zombies",
        "recover_after_restart",
        "registry",
        "replay_dead_letter",
        "resume_tenant",
        "retry_execution",
        "set_tenant_quota",
        "show_dead_letter",
        "show_schedule",
        "show_tenant",
        "start_execution",
        "suspend_tenant",
        "trigger_schedule",
        "unpause_execution",
        "waiting_notes",
    }
)
#: Builtins a value may be made of (containers and scalars; never a callable that acts).
_SAFE_BUILTINS = frozenset(
    {"bool", "bytearray", "bytes", "complex", "dict", "float", "frozenset", "int", "list"}
    | {"range", "set", "slice", "str", "tuple"}
)
#: Builtin errors a use case may raise for a bad argument, rebuilt as themselves.
_BUILTIN_ERRORS = frozenset({"KeyError", "LookupError", "TypeError", "ValueError"})


# --- values on the wire --------------------------------------------------------------------


class _Unpickler(pickle.Unpickler):
    """Builds only classes of plaita's modules and safe builtins: never a function."""

    def find_class(self, module: str, name: str) -> Any:
        return allowed_class(module, name)


def allowed_class(module: str, name: str) -> type:
    """The class ``module.name`` if a frame may carry it, else ``pickle.UnpicklingError``."""
    found: Any = None
    if module == "builtins" and (name in _SAFE_BUILTINS or name in _BUILTIN_ERRORS):
        found = getattr(builtins, name)
    elif module == "plaita" or module.startswith("plaita."):
        try:
            found = functools.reduce(getattr, name.split("."), importlib.import_module(module))
        except (ImportError, AttributeError):
            found = None
    if not isinstance(found, type):
        raise pickle.UnpicklingError(
            f"the dev control socket carries plaita's own values only, not {module}.{name}"
        )
    return found


def dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Any:
    return _Unpickler(io.BytesIO(data)).load()


@attrs.frozen
class Call:
    """One call a command makes: ``container.<provider>(*provider_args)[.<method>](...)``."""

    provider: str
    provider_args: tuple[Any, ...]
    method: str | None
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    #: The tenant scope the command had open (None: none, and the call runs in none).
    tenant: str | None
    #: Who the command acts for (its history entries name them).
    actor: Actor = Actor.UNKNOWN

    def describe(self) -> str:
        return self.provider if self.method is None else f"{self.provider}().{self.method}"


@attrs.frozen
class CallbackArgument:
    """Where a callable argument was: the server calls it back through the connection."""

    index: int


@attrs.frozen
class RaisedError:
    """An error a call raised, as the client rebuilds it: its class, message, attributes."""

    module: str
    name: str
    message: str
    attributes: Mapping[str, Any]

    @classmethod
    def of(cls, exc: BaseException, call: Call) -> RaisedError:
        kind = type(exc)
        if isinstance(exc, PlaitaError) or (
            kind.__module__ == "builtins" and kind.__name__ in _BUILTIN_ERRORS
        ):
            attributes = dict(getattr(exc, "__dict__", {}))
            return cls(kind.__module__, kind.__qualname__, str(exc), attributes)
        return cls(
            DevServerError.__module__,
            DevServerError.__qualname__,
            f"plaita dev failed on {call.describe()}: {kind.__name__}: {exc} (its log has the "
            "traceback)",
            {},
        )

    def rebuild(self) -> BaseException:
        kind = allowed_class(self.module, self.name)
        if not issubclass(kind, BaseException):
            raise pickle.UnpicklingError(f"{self.module}.{self.name} is not an error")
        if kind.__module__ == "builtins":
            return kind(self.message)
        # Errors with keyword-only fields (ExecutionFailedError's execution_id, error) get them
        # back as attributes, not through an __init__ this side cannot call with them.
        error = kind.__new__(kind)
        BaseException.__init__(error, self.message)
        error.__dict__.update(self.attributes)
        return error


# --- frames ----------------------------------------------------------------------------------

_LENGTH = struct.Struct(">I")


async def write_frame(writer: asyncio.StreamWriter, payload: bytes) -> None:
    writer.write(_LENGTH.pack(len(payload)) + payload)
    await writer.drain()


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    """One frame; ``asyncio.IncompleteReadError`` when the peer closed."""
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    if length > MAX_FRAME_BYTES:
        raise ValueError(f"a frame of {length} bytes is over the {MAX_FRAME_BYTES} byte limit")
    return await reader.readexactly(length)


def plaita_version() -> str:
    try:
        return importlib.metadata.version("plaita")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - never installed
        return "0+unknown"


def hello_of(**extra: Any) -> bytes:
    return json.dumps({"protocol": PROTOCOL, "version": plaita_version(), **extra}).encode()


def mismatch(peer: Mapping[str, Any]) -> str | None:
    """Why a peer's hello is refused (another protocol or plaita version), or None."""
    version = plaita_version()
    if peer.get("protocol") != PROTOCOL or peer.get("version") != version:
        return (
            f"this side runs plaita {version} (control protocol {PROTOCOL}), the other "
            f"plaita {peer.get('version')!r} (protocol {peer.get('protocol')!r}); run both from "
            "the same installation"
        )
    return None


# --- the server: in plaita dev ---------------------------------------------------------------


class ControlServer:
    """The dev process's end: answers each call from its own container."""

    def __init__(
        self, container: Container, *, path: Path = SOCKET_PATH, about: Mapping[str, Any]
    ) -> None:
        self.path = path
        self._container = container
        self._about = dict(about)
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Listen; ``DevServerRunningError`` when another dev process answers here."""
        directory = self.path.parent
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Only this user may enter the directory, hence reach the socket (see the module doc).
        os.chmod(directory, stat.S_IRWXU)
        if self.path.exists() or self.path.is_symlink():
            await self._take_over_stale()
        self._server = await asyncio.start_unix_server(self._connection, path=str(self.path))
        os.chmod(self.path, stat.S_IRUSR | stat.S_IWUSR)

    async def _take_over_stale(self) -> None:
        try:
            about = await RemoteContainer(self.path).hello()
        except DevServerUnreachableError:
            self.path.unlink(missing_ok=True)  # left by a dev process that did not stop cleanly
            return
        except DevServerMismatchError as exc:
            about = {"pid": "?", "console": f"of another plaita version: {exc}"}
        raise DevServerRunningError(
            f"another plaita dev (pid {about.get('pid')}, console {about.get('console')}) "
            f"already serves {self.path} in this directory: stop it, or start this one in "
            "another directory"
        )

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._answer(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass  # the command went away (Ctrl-C): nothing to answer
        except (ValueError, pickle.UnpicklingError) as exc:
            log.warning("event=dev.control_refused error=%r", exc)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(HELLO_TIMEOUT_SECONDS):
            peer = json.loads(await read_frame(reader))
        refused = mismatch(peer) if isinstance(peer, dict) else "not a hello"
        await write_frame(writer, hello_of(**self._about, refused=refused))
        if refused is not None:
            return
        async with asyncio.timeout(HELLO_TIMEOUT_SECONDS):
            call = loads(await read_frame(reader))
        if not isinstance(call, Call):
            raise ValueError(f"expected a call, got a {type(call).__name__}")
        running = asyncio.create_task(self._perform(call, writer))
        # The command closes the connection when it stops waiting (Ctrl-C on a `wait`):
        # the call it made is cancelled with it, never left running.
        gone = asyncio.create_task(reader.read(1))
        try:
            await asyncio.wait({running, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not running.done():
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
        if not running.cancelled():
            await write_frame(writer, running.result())

    async def _perform(self, call: Call, writer: asyncio.StreamWriter) -> bytes:
        try:
            value = await self._dispatch(call, writer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not isinstance(exc, PlaitaError):
                log.exception("event=dev.control_call_failed call=%s", call.describe())
            return dumps(("raise", RaisedError.of(exc, call)))
        return dumps(("return", value))

    async def _dispatch(self, call: Call, writer: asyncio.StreamWriter) -> Any:
        if call.provider not in CLI_PROVIDERS:
            raise DevServerError(
                f"plaita dev does not serve {call.provider!r} to commands; it serves "
                f"{', '.join(sorted(CLI_PROVIDERS))}"
            )
        target: Any = getattr(self._container, call.provider)(*call.provider_args)
        if call.method is not None:
            if call.method.startswith("_"):
                raise DevServerError(f"plaita dev does not serve {call.describe()!r}")
            target = getattr(target, call.method)

        def bound(value: Any) -> Any:
            if isinstance(value, CallbackArgument):
                return _callback(writer, value.index)
            return value

        args = [bound(value) for value in call.args]
        kwargs = {name: bound(value) for name, value in call.kwargs.items()}
        scope = no_tenant_scope() if call.tenant is None else tenant_scope(call.tenant)
        with scope, actor_scope(call.actor):
            result = target(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        return result


def _callback(writer: asyncio.StreamWriter, index: int) -> Callable[..., None]:
    def call_back(*args: Any, **kwargs: Any) -> None:
        # A progress report: written at once, in order, before the call's answer.
        payload = dumps(("callback", index, args, kwargs))
        writer.write(_LENGTH.pack(len(payload)) + payload)

    return call_back


# --- the client: in a CLI command ------------------------------------------------------------


class RemoteContainer:
    """Stands in for the container in a command's body: every provider in ``CLI_PROVIDERS``
    answers from the dev process on ``path``. Its calls are awaited, as the use cases and
    stores the CLI reads are; the clock is this machine's own (the dev process's is too)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def clock(self) -> Clock:
        return system_clock()

    def __getattr__(self, name: str) -> RemoteProvider:
        if name.startswith("_"):
            raise AttributeError(name)
        return RemoteProvider(self, name)

    async def hello(self) -> dict[str, Any]:
        """What the dev process says about itself; a named error when it cannot be used."""
        async with self._connected() as (_reader, _writer, about):
            return about

    async def call(self, call: Call, callbacks: list[Callable[..., Any]]) -> Any:
        async with self._connected() as (reader, writer, _about):
            await write_frame(writer, dumps(call))
            while True:
                kind, *rest = loads(await read_frame(reader))
                if kind == "callback":
                    index, args, kwargs = rest
                    callbacks[index](*args, **kwargs)
                elif kind == "raise":
                    raise rest[0].rebuild()
                else:
                    return rest[0]

    @contextlib.asynccontextmanager
    async def _connected(
        self,
    ) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter, dict[str, Any]]]:
        try:
            reader, writer = await asyncio.open_unix_connection(str(self.path))
        except OSError as exc:  # no socket, nobody listening, a path too long, no permission
            raise DevServerUnreachableError(self._unreachable(exc)) from None
        try:
            try:
                await write_frame(writer, hello_of())
                about = json.loads(await read_frame(reader))
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                raise DevServerUnreachableError(self._unreachable(exc)) from None
            if about.get("refused"):
                raise DevServerMismatchError(
                    f"the plaita dev on {self.path} refused this command: {about['refused']}"
                )
            yield reader, writer, about
        except asyncio.IncompleteReadError:
            raise DevServerUnreachableError(
                f"the plaita dev on {self.path} closed the connection before it answered (did "
                "it stop?)"
            ) from None
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _unreachable(self, exc: BaseException) -> str:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return (
            f"no plaita dev answers on {self.path} ({reason or type(exc).__name__}): start "
            "`plaita dev` in this directory, point --dev-socket (PLAITA_DEV_SOCKET) at the "
            "socket of the one you started, or give --redis-url for a Redis"
        )


@attrs.frozen
class RemoteProvider:
    """``container.<name>``: called, it gives what the dev process's provider gives."""

    container: RemoteContainer
    name: str

    def __call__(self, *args: Any) -> RemoteObject:
        return RemoteObject(self.container, self.name, args)


@attrs.frozen
class RemoteObject:
    """A use case (awaited when called) or a store (its methods awaited) of the dev process."""

    container: RemoteContainer
    provider: str
    provider_args: tuple[Any, ...]

    def __call__(self, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        return self._call(None, args, kwargs)

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        if method.startswith("_"):
            raise AttributeError(method)

        def call(*args: Any, **kwargs: Any) -> Awaitable[Any]:
            return self._call(method, args, kwargs)

        return call

    async def _call(self, method: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        callbacks: list[Callable[..., Any]] = []

        def carried(value: Any) -> Any:
            if callable(value) and not isinstance(value, type):
                callbacks.append(value)
                return CallbackArgument(len(callbacks) - 1)
            return value

        call = Call(
            provider=self.provider,
            provider_args=self.provider_args,
            method=method,
            args=tuple(carried(value) for value in args),
            kwargs={name: carried(value) for name, value in kwargs.items()},
            tenant=_open_tenant(),
            actor=current_actor(),
        )
        return await self.container.call(call, callbacks)


def _open_tenant() -> str | None:
    try:
        return current_tenant()
    except TenantContextMissingError:
        return None


def run_on_dev(
    path: Path, body: Callable[[Container], Awaitable[T]], *, tenant_id: str | None
) -> T:
    """Run a command's ``body`` with the dev process on ``path`` as its container."""

    async def go() -> T:
        remote = RemoteContainer(path)
        await remote.hello()  # a named error before the body starts, when nobody answers
        with tenant_scope(tenant_id) if tenant_id is not None else contextlib.nullcontext():
            # The body asks for use cases and stores by name; the remote container answers
            # every one of CLI_PROVIDERS, and refuses by name anything else a body asks for.
            return await body(cast(Container, remote))

    return asyncio.run(go())
