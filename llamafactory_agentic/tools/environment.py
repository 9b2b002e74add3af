# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Per-trajectory environments: the `Environment` contract and the `EnvironmentTool` that serves it (docs/tools.md).

A tool (`BaseTool`) answers each call on its own; an environment keeps state for one trajectory: it is created for
the trajectory's first call, takes each later call of that trajectory (`step`), forks when ARPO branches the
trajectory, and is closed when the trajectory finishes. `EnvironmentTool` makes an `Environment` class a tool: it
keeps one environment per trajectory id, so the executor, its metrics and its limits see an ordinary tool.

Fork at a branch (docs/tools.md "Environments"): the branch gets `Environment.fork()` of its source when the class
implements it, else a fresh environment into which the source's calls so far are replayed (their outputs dropped)
before the branch's own first call; the replay runs in the branch's own call, within its time budget, and resumes on
the next call if the budget runs out. The tool keeps each trajectory's call history (the calls its state is made of),
so an environment closed to respect `max_sessions` is rebuilt the same way.
"""

import inspect
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ..common.log import get_logger
from .base import STATUS_ERROR, STATUS_TIMEOUT, BaseTool, ToolError, ToolOutput, check_number, error_text


logger = get_logger(__name__)

# `ToolOutput.meta[RESET_META]`: the step lost the environment's state (e.g. a restarted interpreter): "after" (the
# state is now empty) or "before" (lost before the call ran: the state now holds that call only)
RESET_META = "reset"


class Environment:
    r"""State of one trajectory that its tool calls read and change (the contract; docs/tools.md "Environments").

    Subclasses set `name` and `default_tag` (as a tool does) and implement `step`; `fork` and `close` are optional.
    The constructor's keyword arguments are the `params` of the tool config entry; it is called once per trajectory
    (in a tool worker thread) and may raise `TransientToolError` when a resource cannot be started (retried).

    Bounds: `step` gets the seconds it may take and must return within them (a step that overruns is answered
    `timeout` by the executor while it goes on in the background, and the trajectory's next call waits for it);
    memory and output bounds are the environment's own (`PythonSession`: RLIMIT_AS and an output cap).
    Errors: an exception from `step` becomes an error observation (`Error: Tool(name) execution failed with message:
    ...`) and the state is kept; a step that lost the state says so in `ToolOutput.meta["reset"]` (`RESET_META`).
    """

    name: str = "environment"
    default_tag: str = "environment"

    def step(self, call: str, timeout_s: float) -> ToolOutput:
        r"""Apply one call (the body between the tags, stripped, non-empty) and return its observation.

        Args:
            call: the call text.
            timeout_s: seconds this step may take (wall clock).

        Returns:
            A `ToolOutput` (text and status, see `ToolResult`).
        """
        raise NotImplementedError

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        r"""Check the tool config's `params` before any environment is built.

        The default checks that the constructor accepts their names. Raises `ValueError` naming the bad parameter.
        """
        try:
            inspect.signature(cls).bind(**params)
        except TypeError as exc:
            raise ValueError(f"{cls.__name__}: {exc}") from None

    def fork(self) -> "Environment | None":
        r"""An independent copy in the same state, or None when it cannot be copied (the tool then replays calls)."""
        return None

    def close(self) -> None:
        r"""Release the environment's resources (processes, files, connections); called once."""


@dataclass
class _Session:
    r"""One trajectory's environment: `env` holds the state of `history[:applied]` (None: not built yet)."""

    env: Environment | None = None
    history: list[str] = field(default_factory=list)
    applied: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class SessionCall:
    r"""A parsed call bound to its trajectory (`EnvironmentTool.bind`); `trajectory_id` None: a one-off session."""

    trajectory_id: str | None
    call: str


class EnvironmentTool(BaseTool):
    r"""A tool that keeps one `environment_class` instance per trajectory (docs/tools.md "Environments").

    The executor recognises it by `stateful = True`: it binds each call to its trajectory id (`bind`), never caches
    its results and never shares an execution between calls (`dedup` is off). The agent loop calls `fork_trajectory`
    when ARPO branches a trajectory and `release` when a trajectory finishes. A call without a trajectory id (the
    `tools` command line) runs in a fresh environment that is closed after the call.

    Args:
        max_sessions: environments kept at once (least recently used closed first; its trajectory's calls are
            replayed into a new one on its next call).
        replay_timeout_s: seconds after which a call starts no further replayed call (default: `timeout_s`); the rest
            is replayed at the trajectory's next call. Every step, replayed or not, gets `timeout_s` (kept as
            `call_timeout_s`); the tool's `timeout_s`, which the executor waits for, becomes
            `2 * call_timeout_s + replay_timeout_s`.
        **kwargs: `BaseTool` arguments (tag, timeout_s, retries, call_limit) and the environment's own `params`.
            `retries` counts attempts to build or restore an environment; a step itself is never retried (it may
            have changed the state).

    Raises:
        ValueError: `dedup` true, a bad `max_sessions`, or arguments the environment class rejects.
    """

    stateful = True
    default_dedup = False
    environment_class: type[Environment] = Environment
    _BASE_KEYS = ("tag", "timeout_s", "retries", "call_limit", "dedup", "backoff_s")

    def __init__(self, max_sessions: int = 256, replay_timeout_s: float | None = None, **kwargs: Any) -> None:
        r"""Create the tool (the arguments are described in the class docstring)."""
        base = {k: kwargs.pop(k) for k in self._BASE_KEYS if k in kwargs}
        if base.get("dedup"):
            raise ValueError(f"`dedup` must be false for the environment `{self.name}`: its calls change state")
        super().__init__(**base)
        self.call_timeout_s = self.timeout_s
        self.replay_timeout_s = check_number("replay_timeout_s", self.timeout_s if replay_timeout_s is None
                                             else replay_timeout_s)  # fmt: skip
        # what the executor waits for: the replay (its last call may start just before its deadline), then the step
        self.timeout_s = 2 * self.call_timeout_s + self.replay_timeout_s
        self.max_sessions = check_number("max_sessions", max_sessions, integer=True, minimum=1, inclusive=True)
        self.params = kwargs
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._lock = threading.Lock()
        self._counters = {"sessions_created": 0, "replayed_calls": 0, "forks": 0, "forks_copied": 0, "resets": 0}
        self.environment_class.check_params(self.params)  # checked when the tool is built, not at the first call

    @classmethod
    def accepted_params(cls, params: dict[str, Any] | None = None) -> set[str] | None:
        r"""`BaseTool` arguments, `max_sessions` and the environment class's constructor arguments (the registry)."""
        names = set(cls._BASE_KEYS) | {"max_sessions", "replay_timeout_s"}
        sig = inspect.signature(cls.environment_class.__init__)
        if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            return None
        return names | {n for n in sig.parameters if n != "self"}

    # ------------------------------------------------------------------ executor side
    def bind(self, trajectory_id: str | None, call: str) -> SessionCall:
        r"""The parsed call of trajectory `trajectory_id` (what the executor passes to `execute_args`)."""
        return SessionCall(trajectory_id, call)

    def cache_key(self, args: Any) -> str:
        r"""The call text (results are never cached; the key only names the call in logs)."""
        return args.call if isinstance(args, SessionCall) else str(args)

    def run(self, args: Any) -> ToolOutput:
        r"""Apply one call to its trajectory's environment (built, forked or replayed first when needed).

        Raises:
            TransientToolError (or any exception of the environment's constructor): the environment could not be
                built; nothing ran, so the attempt is retried.
        """
        if not isinstance(args, SessionCall):
            args = SessionCall(None, str(args))
        if args.trajectory_id is None:
            env = self._new_env()
            try:
                return self._step(env, args.call, time.monotonic() + self.call_timeout_s)
            finally:
                self._close_env(env)
        session = self._session(args.trajectory_id)
        with session.lock:
            if not self._restore(session, time.monotonic() + self.replay_timeout_s):
                pending = len(session.history) - session.applied
                text = error_text(self.name, f"the environment could not be restored within {self.replay_timeout_s:g} "
                                  f"seconds ({pending} earlier calls still to replay); try again")  # fmt: skip
                return ToolOutput(text, STATUS_TIMEOUT)
            output = self._step(session.env, args.call, time.monotonic() + self.call_timeout_s)
            session.history.append(args.call)
            session.applied += 1
            self._apply_reset(session, output)
            return output

    # ------------------------------------------------------------------ agent loop side
    def fork_trajectory(self, parent_id: str, child_id: str) -> None:
        r"""Give `child_id` (an ARPO branch) the state of `parent_id` as it is now (docs/tools.md "Environments").

        The copy is `Environment.fork()` when the source is idle and implements it; otherwise the branch replays the
        source's calls into a fresh environment at its own first call. A source that never called the tool gives
        nothing (the branch starts fresh). Never raises.
        """
        with self._lock:
            source = self._sessions.get(parent_id)
        if source is None:
            return
        copy = None
        if source.lock.acquire(timeout=0.05):  # a source with a call still running (timed out) is not waited for
            try:
                if source.env is not None and source.applied == len(source.history):
                    try:
                        copy = source.env.fork()
                    except Exception as exc:  # noqa: BLE001 - a failed copy falls back to the replay
                        logger.debug("[agentic-tools] %s fork failed, replaying instead: %s", self.name, exc)
            finally:
                source.lock.release()
        history = list(source.history)  # the source's state is made of these calls (replayed when not copied)
        child = _Session(env=copy, history=history, applied=len(history) if copy is not None else 0)
        self._count("forks")
        self._count("forks_copied", int(copy is not None))
        self._insert(child_id, child)

    def release(self, trajectory_ids: list[str] | None = None) -> None:
        r"""Close the environments of `trajectory_ids` (all when None); their histories are forgotten. Never raises."""
        with self._lock:
            if trajectory_ids is None:
                sessions = list(self._sessions.values())
                self._sessions.clear()
            else:
                sessions = [s for s in (self._sessions.pop(t, None) for t in trajectory_ids) if s is not None]
        for session in sessions:
            env, session.env = session.env, None
            if env is not None:
                self._close_env(env)

    def live_sessions(self) -> list[str]:
        r"""Trajectory ids with a session (built or pending), least recently used first."""
        with self._lock:
            return list(self._sessions)

    def pop_environment_metrics(self) -> dict[str, float]:
        r"""Counters since the last call, then reset.

        Returns:
            `sessions_created`, `replayed_calls`, `forks`, `forks_copied`, `resets`, and `sessions_live`
            (environments open now).
        """
        with self._lock:
            out = {k: float(v) for k, v in self._counters.items()}
            out["sessions_live"] = float(sum(s.env is not None for s in self._sessions.values()))
            for key in self._counters:
                self._counters[key] = 0
        return out

    def close(self) -> None:
        r"""Close every environment."""
        self.release(None)

    # ------------------------------------------------------------------ internals
    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counters[key] += n

    def _new_env(self) -> Environment:
        env = self.environment_class(**self.params)
        self._count("sessions_created")
        return env

    def _close_env(self, env: Environment) -> None:
        try:
            env.close()
        except Exception as exc:  # noqa: BLE001
            logger.debug("[agentic-tools] closing a %s environment failed: %s", self.name, exc)

    def _session(self, trajectory_id: str) -> _Session:
        with self._lock:
            session = self._sessions.get(trajectory_id)
            if session is not None:
                self._sessions.move_to_end(trajectory_id)
                return session
        session = _Session()
        self._insert(trajectory_id, session)
        return session

    def _insert(self, trajectory_id: str, session: _Session) -> None:
        with self._lock:
            old = self._sessions.pop(trajectory_id, None)
            self._sessions[trajectory_id] = session
            excess = self._excess(session)
        if old is not None and old.env is not None:
            self._close_env(old.env)
        for candidate in excess:
            self._evict(candidate)

    def _excess(self, keep: _Session) -> list[_Session]:
        r"""The least recently used built sessions beyond `max_sessions`, `keep` excepted (call with `_lock` held)."""
        built = [s for s in self._sessions.values() if s.env is not None and s is not keep]
        excess = len(built) + int(keep.env is not None) - self.max_sessions
        return built[: max(0, excess)]

    def _evict(self, session: _Session) -> None:
        r"""Close `session`'s environment but keep its history (rebuilt by replay on the trajectory's next call)."""
        if not session.lock.acquire(timeout=0.05):
            return  # in use: left open (the bound is exceeded by the sessions running a call)
        try:
            env, session.env = session.env, None
            session.applied = 0
        finally:
            session.lock.release()
        if env is not None:
            self._close_env(env)

    def _restore(self, session: _Session, deadline: float) -> bool:
        r"""Build `session.env` and replay `history[applied:]`, starting no replayed call after `deadline`.

        Returns:
            True when the environment is up to date; False when calls are left (replayed at the next call).
        """
        if session.env is None:
            session.env = self._new_env()  # may raise: retried by `execute_args` (nothing ran)
            session.applied = 0
            with self._lock:
                excess = self._excess(session)
            for candidate in excess:  # closed now; their trajectories replay on their next call
                self._evict(candidate)
        while session.applied < len(session.history):
            if time.monotonic() >= deadline:
                return False
            # a replayed call gets the whole per-call deadline (it ran within it before); `deadline` bounds the start
            output = self._step(session.env, session.history[session.applied], time.monotonic() + self.call_timeout_s)
            self._count("replayed_calls")
            session.applied += 1
            self._apply_reset(session, output)  # a replayed call that lost the state (as it did in the source)
        return True

    def _apply_reset(self, session: _Session, output: ToolOutput) -> None:
        r"""After the step of `history[applied - 1]`: drop the calls a lost state no longer holds (`RESET_META`)."""
        reset = output.meta.get(RESET_META)
        if not reset:
            return
        self._count("resets")
        keep = session.applied - 1 if reset == "before" else session.applied
        del session.history[:keep]
        session.applied -= keep

    def _step(self, env: Environment, call: str, deadline: float) -> ToolOutput:
        try:
            output = env.step(call, max(0.01, deadline - time.monotonic()))
        except ToolError as exc:
            return ToolOutput(error_text(self.name, str(exc)), STATUS_ERROR)
        except Exception as exc:  # noqa: BLE001 - an environment's failure is an observation, never a dead step
            return ToolOutput(error_text(self.name, f"{type(exc).__name__}: {exc}"), STATUS_ERROR)
        if not isinstance(output, ToolOutput):
            return ToolOutput(error_text(self.name, f"step returned {type(output).__name__}, not ToolOutput"),
                              STATUS_ERROR)  # fmt: skip
        return output

    def __repr__(self) -> str:
        r"""Standard `__repr__`."""
        return (f"{type(self).__name__}(environment={self.environment_class.__name__}, tag={self.tag!r}, "
                f"timeout_s={self.call_timeout_s}, replay_timeout_s={self.replay_timeout_s}, "
                f"max_sessions={self.max_sessions})")  # fmt: skip


def environment_tool(env_class: type[Environment]) -> type[EnvironmentTool]:
    r"""The `EnvironmentTool` class serving `env_class` (named and tagged as it is); made once per class.

    Raises:
        TypeError: `env_class` is not an `Environment` subclass.
    """
    if not (isinstance(env_class, type) and issubclass(env_class, Environment)):
        raise TypeError(f"{env_class!r} is not an Environment subclass")
    cached = vars(env_class).get("_tool_class")
    if cached is not None:
        return cached
    tool_class = type(
        f"{env_class.__name__}Tool",
        (EnvironmentTool,),
        {
            "name": env_class.name,
            "default_tag": env_class.default_tag,
            "environment_class": env_class,
            "__module__": env_class.__module__,
            "__doc__": f"Per-trajectory `{env_class.__name__}` environment served as a tool (`EnvironmentTool`).",
        },
    )
    env_class._tool_class = tool_class
    return tool_class


__all__ = ["RESET_META", "Environment", "EnvironmentTool", "SessionCall", "environment_tool"]
