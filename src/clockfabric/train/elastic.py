"""The rank side: a training loop wrapped so that a lost peer costs one redone step.

    with elastic(module, optimizer, loader, log=log.write) as job:
        for step, (x, y) in job.steps(args.steps):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(job.model(x), y)
            loss.backward()          # gradients averaged over the job's current group
            optimizer.step()
            job.record(loss=loss.item())

`job.model` is the module in DistributedDataParallel, rebuilt on each new group. Its gradient
all-reduce is a comm hook that never raises: an error marks the step failed, and the loop then
undoes it (the state as it was before the step), waits for the coordinator's next generation,
re-forms the group and takes the state from the member that completed the most steps. A
spare enters the same way: it waits for a rank, joins, and receives the state. A member lost
while a group forms sends the others on to the generation after; a generation written while
the loop runs (a rank moved off a failing GPU) is joined at the next step boundary.

A sharded optimizer (ZeRO-1) needs the group to exist when it is made: give a factory,
`lambda params: ZeroRedundancyOptimizer(params, ...)`, and use `job.optimizer`. Each rank's
shard is mirrored on its buddy rank, which steps it too (train.zero).

`checkpoint_dir` and `checkpoint_every` K: every rank writes its state there every K steps
(train.checkpoint); when memory cannot rebuild the state (a ZeRO-1 rank lost with its buddy),
every rank loads the last checkpoint and the job goes on from its step. Without one, the
members log a `stopped` event and raise ShardLost.

The wrapper finds its job from the environment, whatever launched it: the board
(`CLOCKFABRIC_TRAIN_STORE`), its first rank (`RANK`, as torchrun and `clockfabric train run`
set it, or Slurm's `SLURM_PROCID`), or that it is a spare (`CLOCKFABRIC_TRAIN_SPARE=1`).
"""

from __future__ import annotations

import gc
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer

from clockfabric.errors import ClockfabricError
from clockfabric.train import backend, control, group, presence, state, zero
from clockfabric.train.bound import StepBound
from clockfabric.train.checkpoint import Checkpoints
from clockfabric.train.ddp import ONE_BUCKET_MB, Guarded, average
from clockfabric.train.heartbeat import Heartbeat, shut_sockets_to, split

Loader = Callable[[int, int], Any]  # (position, rank) -> that rank's batch at that position
OptimizerFactory = Callable[[Any], torch.optim.Optimizer]  # the module's parameters -> the optimizer


class Elastic:
    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer | OptimizerFactory,
                 loader: Loader, *, log: Callable[..., None] | None = None, timeout_s: float = 30.0,
                 wait_s: float = 600.0, checkpoint_dir: Path | str | None = None, checkpoint_every: int = 100):
        self.module, self.loader = module, loader
        self.make_optimizer = None if isinstance(optimizer, torch.optim.Optimizer) else optimizer
        self._optimizer = optimizer if isinstance(optimizer, torch.optim.Optimizer) else None
        self.buddy: zero.Buddy | None = None  # a sharded optimizer's shard and its mirror of the previous rank's
        self.log = log or (lambda **_: None)
        self.timeout_s, self.wait_s = timeout_s, wait_s
        self.bound = StepBound(timeout_s)  # the collectives' timeout, sized from the measured steps
        self.checkpoints = Checkpoints(checkpoint_dir, checkpoint_every) if checkpoint_dir else None
        self.restored: dict[str, Any] = {}  # what the last group formed resumed from: a checkpoint, a reshard
        self.previous: dict[str, Any] | None = None  # ZeRO-1: the snapshot before the last completed step
        self._lent: dict[str, Any] | None = None  # a snapshot no longer wanted: the next one copies into it
        try:
            self.host, self.first_rank, beat = identity(os.environ)
            self.board = control.Board.open(os.environ[control.STORE_ENV])
        except (RuntimeError, ClockfabricError) as e:  # no job to join: one line, nothing started
            sys.exit(f"clockfabric: {e}")
        self.heartbeat = Heartbeat(self.board, self.host, beat)
        self.presence: socket.socket | None = None  # held open for as long as this process lives
        self.board_gone: str | None = None  # why the board stopped answering, once it did
        self.rank, self.step, self.failed = -1, 0, False
        self.carried = False  # a spare: whether it holds a rank's state yet
        self.fields: dict[str, Any] = {}
        self.order = {p: i for i, p in enumerate(module.parameters())}
        self.model: Guarded | None = None
        self.gen: control.Generation | None = None

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        assert self._optimizer is not None, "the optimizer is made once the group is formed"
        return self._optimizer

    @property
    def world(self) -> int:
        return self.gen.world if self.gen else 0

    def __enter__(self) -> Elastic:
        if where := self.board.text(presence.KEY):
            self.presence = presence.announce(where, self.host)
            self.heartbeat.keep.add(self.presence.getpeername()[1])
        self.heartbeat.start()
        self.heartbeat.report(None, [])  # its beat address, before it registers
        self.board.register(self.host, self.first_rank, torch.__version__)
        if self.first_rank is None:
            gen = self._assignment()
            self._join(gen, completed=-1)
        else:
            first = self.board.wait_generation(-1, self.wait_s)
            self.rank = self.first_rank
            self._join(first, completed=0)
        return self

    @property
    def held(self) -> state.Stateful:
        """The optimizer state a step's snapshot holds: this rank's shard and its mirror under
        ZeRO-1, else the whole optimizer's."""
        return self.buddy or zero.local(self.optimizer)

    def _shard(self, optimizer: ZeroRedundancyOptimizer) -> None:
        """ZeRO's step, made to record a failure rather than raise it, the predecessor's shard
        stepped on the mirror first (before ZeRO's broadcasts change the parameters)."""
        self.buddy = zero.Buddy(optimizer)
        step = optimizer.step

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self.failed:  # the gradients were not averaged: the step is undone anyway
                return None
            try:
                if self.buddy:
                    self.buddy.step()
                return step(*args, **kwargs)  # the local step, then every shard's parameters broadcast
            except RuntimeError:  # a peer is gone
                self.failed = True
                return None

        optimizer.step = guarded  # type: ignore[method-assign]

    def __exit__(self, *exc: object) -> None:
        self.heartbeat.stop()
        if dist.is_initialized():
            dist.destroy_process_group()

    def steps(self, total: int) -> Iterator[tuple[int, Any]]:
        """(step, batch) from the current step to total; a failed step is undone and yielded again."""
        while self.step < total:
            self._follow()
            start = time.time()  # the snapshot is part of the step's cost
            undo = state.snapshot(self.module, self.held, self.step, self.step, into=self._lent)
            self._lent, self.failed, self.fields = None, False, {}
            yield self.step, self.loader(self.step, self.rank)
            if self.failed:
                self._recover(undo, start)
                self._lent = undo  # restored by copying out of it: its tensors are free again
                continue
            self._lent = undo
            if self.buddy:
                # survivors a step apart go on from the step before: this one is then redone from here
                self._lent, self.previous = self.previous, undo
                self.fields |= {"buddy_s": round(self.buddy.cost_s, 5), "buddy_bytes": self.buddy.bytes}
                self.buddy.cost_s = 0.0
            backend.synchronize(group.current())  # the step's CUDA work is part of its time
            duration = time.time() - start
            self.log(rank=self.rank, step=self.step, start=start, duration_s=duration,
                     generation=self.gen.number if self.gen else None, **self.fields)
            if (bound := self.bound.completed(duration)) is not None:
                group.settle(bound)
            self.step += 1
            if self.checkpoints and self.checkpoints.due(self.step):
                self.checkpoints.write(self.step, self.rank, state.capture(self.module, zero.local(self.optimizer),
                                                                           self.step, self.step))

    def record(self, **fields: Any) -> None:
        """Fields for this step's log record (written once the step completes)."""
        self.fields.update(fields)

    def digest(self) -> str:
        return state.digest(self.module)

    # ---- joining a generation --------------------------------------------------------------
    def _assignment(self) -> control.Generation:
        """A spare waits until a running generation gives its host a rank."""
        self.log(event="spare", host=self.host, time=time.time())
        while True:
            gen = self.board.generation()
            if gen is not None and gen.state == control.RUNNING and self.host in gen.hosts:
                self.rank = gen.hosts.index(self.host)
                return gen
            time.sleep(0.02)

    def _recover(self, undo: dict[str, Any], started: float) -> None:
        if self.board_gone:
            raise control.BoardGone(f"a step failed, and no spare can take a lost rank's place: {self.board_gone}")
        failed_at = time.time()
        fired = self.bound.fired(failed_at - started)  # read before the next group resets it
        # the old group's operations ended first: a ZeRO broadcast still receiving into the
        # parameters after the restore would leave this member a step ahead where it lands
        self._leave()
        self._drop_group()
        state.restore(undo, self.module, self.held)
        assert self.gen is not None
        self.log(rank=self.rank, event="step failed", step=self.step, generation=self.gen.number, time=failed_at)
        if fired:
            self.log(rank=self.rank, event="bound fired", step=self.step, generation=self.gen.number,
                     bound_s=self.bound.applied, elapsed_s=round(failed_at - started, 3), time=failed_at)
        # the coordinator issues the generation again if no member turns out lost (a slow step)
        self.board.mark_failed(self.gen.number, self.rank, bound_s=self.bound.applied if fired else None)
        lost = set(self.gen.lost)
        self._join(self.board.wait_generation(self.gen.number, self.wait_s), completed=self.step)
        if fired and set(self.gen.lost) <= lost:  # no member was lost: the step was only slow
            self.bound.slow(failed_at - started)

    def _follow(self) -> None:
        """At a step boundary: a newer running generation (a rank replaced before it failed, as
        on a critical XID) is joined now, the step count as it stands."""
        if self.board_gone:
            return
        try:
            newer = self.board.generation()
        except control.BoardGone as e:  # the job goes on, with no one to replace a lost rank
            self.board_gone = str(e)
            self.log(rank=self.rank, event="board gone", step=self.step, why=self.board_gone, time=time.time())
            return
        if self.gen is not None and newer is not None and newer.number > self.gen.number \
                and newer.state == control.RUNNING:
            self.log(rank=self.rank, event="new generation", step=self.step, generation=newer.number, time=time.time())
            self._leave()
            self._join(newer, completed=self.step)

    def _leave(self) -> None:
        """The old group is over: a peer still blocked in it on this member wakes now, not at its timeout."""
        assert self.gen is not None
        shut_sockets_to({split(b)[0] for b in self.gen.beats} - {split(self.heartbeat.beat)[0]}, self.heartbeat.keep)

    def _join(self, gen: control.Generation, completed: int) -> None:
        """Join gen; a member lost while it forms or carries the state (a second failure, the
        spare itself) makes every other member wait for the next generation and join that."""
        while True:
            while self.host not in gen.hosts:  # drained (its GPU reported a critical XID): wait to be fenced
                self.log(event="drained", host=self.host, generation=gen.number, time=time.time())
                gen = self.board.wait_generation(gen.number, self.wait_s)
            self.rank = self.heartbeat.rank = gen.hosts.index(self.host)  # judged (frozen?) from here on
            newer = None
            self._drop_group()
            try:
                self.board.mark_ready(gen.number, self.rank)
                newer = self.board.wait_ready(gen, self.wait_s)
                if newer is None:
                    self._form(gen, completed)
                    return
            except RuntimeError as e:  # gloo: a member of the group being formed is gone
                self.tell(rank=self.rank, event="join failed", generation=gen.number, error=str(e)[:200],
                          time=time.time())
                self._leave()
            completed = self.step if completed >= 0 or self.carried else -1
            gen = newer or self.board.wait_generation(gen.number, self.wait_s)

    def _drop_group(self) -> None:
        """Destroy the old group before marking ready, not after: its destruction waits for its
        operations, and every member must reach gloo's rendezvous together (group.CONNECT_WAITS)."""
        self.heartbeat.left()
        if self.model is None and not dist.is_initialized():
            return  # none to drop: never made, or dropped when the step failed
        self.model = None
        gc.collect()  # the old wrapper holds the old group: let both go
        group.leave()
        if self._optimizer is not None and zero.is_sharded(self._optimizer):
            zero.rebind(self._optimizer)  # type: ignore[arg-type]  # to no group: ZeRO held the old one

    def _form(self, gen: control.Generation, completed: int) -> None:
        started = time.time()
        self.gen = gen
        group.form(self.board.group_store(gen.number), self.rank, gen.world, backend=backend.for_module(self.module))
        self.heartbeat.joined(gen.number, {split(b)[0] for b in gen.beats} - {split(self.heartbeat.beat)[0]})
        formed = time.time()
        if self._optimizer is None:
            assert self.make_optimizer is not None
            self._optimizer = self.make_optimizer(self.module.parameters())
            if zero.is_sharded(self._optimizer):
                self._shard(self._optimizer)  # type: ignore[arg-type]
        sharded = zero.is_sharded(self.optimizer)
        if sharded:
            zero.rebind(self.optimizer)  # type: ignore[arg-type]
        carried = self._carry(completed) if gen.number > 0 else 0
        self.previous = None  # a snapshot from before the group formed is no step of the new group's
        if self.buddy:  # every mirror holds its predecessor's shard as of this step, a new member's too
            carried += self.buddy.exchange()
        transferred = time.time()
        # one bucket: the hook puts it in parameter order, which only a whole model can be. After
        # a carry every member holds the same parameters, so DDP's own broadcast of them is
        # skipped: it would cost time, and a member lost in it would cost the others its bound
        self.model = Guarded(self.module, bucket_cap_mb=ONE_BUCKET_MB, init_sync=gen.number == 0)
        self.model.job = self
        self.model.register_comm_hook(self, average)
        group.settle(self.bound.joined())
        self.tell(rank=self.rank, event="joined", generation=gen.number, step=self.step, host=self.host,
                  bytes=carried, form_s=formed - started, transfer_s=transferred - formed,
                  wrap_s=time.time() - transferred, time=time.time(), **self.restored)
        self.restored = {}

    def _carry(self, completed: int) -> int:
        """A new member, or survivors a step apart: the most advanced one's state for all; the
        bytes carried. ZeRO-1: the plan zero.agree makes (the step; each rank rebuilt to it, a
        new member or a survivor a step behind, gets its shard from its buddy's mirror; on a
        group of another size every shard is gathered and ZeRO is made again)."""
        if self.buddy is None:
            source, _ = group.most_advanced(completed, self._superseded)
            return self._from_source(source)
        try:
            plan = zero.agree(self.buddy, completed, self._previous_step(), self._superseded)
        except zero.ShardLost as lost:
            return self._from_checkpoint(lost, lost.reached)
        mine = self.buddy.zero.rank if completed >= 0 else None
        if mine not in plan.rebuilt and completed > plan.at and self.previous:  # its last step is redone
            self.step, _ = state.restore(self.previous, self.module, self.buddy)
        carried = self._from_source(plan.source)
        if not plan.resharded:
            return carried + self.buddy.hand_over(plan.rebuilt)
        merged, sent = plan.gather(self.buddy, self._superseded)
        assert self.make_optimizer is not None
        self._optimizer = self.make_optimizer(self.module.parameters())
        self._optimizer.load_state_dict(merged)
        self._shard(self._optimizer)  # type: ignore[arg-type]
        self.restored = {"resharded_from": plan.world}
        return carried + sent

    def _from_source(self, source: int) -> int:
        """The source member's parameters, generators and step on every member (a sharded
        optimizer's state travels apart); the bytes."""
        whole = None if zero.is_sharded(self.optimizer) else self.optimizer
        mine = state.to_bytes(state.capture(self.module, whole, self.step, self.step)) if self.rank == source else None
        blob = group.broadcast_bytes(mine, source, self._superseded)
        if self.rank != source:
            self.step, _ = state.restore(state.from_bytes(blob), self.module, whole)
            self.carried = True
        return len(blob)

    def _previous_step(self) -> int | None:
        return int(self.previous["step"]) if self.previous else None

    def _superseded(self) -> bool:
        """A newer generation was issued (a member of this one lost while the state is carried):
        the transfer is abandoned at once, not waited out (group.Superseded)."""
        assert self.gen is not None
        return self.board.superseded(self.gen.number)

    def _from_checkpoint(self, lost: zero.ShardLost, reached: int) -> int:
        """Every member loads the last disk checkpoint (each decides alike: the same files, the
        same counts); without one the job stops. The bytes read."""
        at = self.checkpoints.latest(self.world) if self.checkpoints else None
        if self.checkpoints is None or at is None:
            why = f"{lost}; no disk checkpoint to resume from" + ("" if self.checkpoints else " (checkpoint_dir)")
            self.tell(rank=self.rank, event="stopped", why=why, time=time.time())
            raise zero.ShardLost(why) from None
        saved = self.checkpoints.read(at, self.rank)
        self.step, _ = state.restore(saved, self.module, zero.local(self.optimizer))
        self.carried = True
        self.restored = {"checkpoint_step": at, "redone": reached - at,
                         "why": f"{lost}: resumed from checkpoint at step {at}, {reached - at} steps redone"}
        return self.checkpoints.path(at, self.rank).stat().st_size


    def tell(self, **record: Any) -> None:
        """A record for the job's log and for the coordinator (it reads them from the board)."""
        self.log(**record)
        self.board.post(record)


def identity(env: Mapping[str, str]) -> tuple[str, int | None, str]:
    """(this member's name, its first rank or None for a spare, its heartbeat address[:port]),
    from what `clockfabric train run`, torchrun or Slurm set. One clear line if no board is named."""
    if control.STORE_ENV not in env:
        launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "srun" if "SLURM_PROCID" in env else None
        how = (f"under {launcher}, start `clockfabric train coordinator` and set {control.STORE_ENV}=tcp://HOST:PORT"
               if launcher else "run the script with `clockfabric train run`, or under a launcher with "
               f"`clockfabric train coordinator` and {control.STORE_ENV}")
        raise RuntimeError(f"{control.STORE_ENV} is not set: {how}")
    spare = env.get(control.SPARE_ENV, "") not in ("", "0")
    first = env.get("RANK", env.get("SLURM_PROCID"))
    rank = None if spare or first is None else int(first)
    if rank is not None and control.RANKS_ENV in env and rank >= int(env[control.RANKS_ENV]):
        rank = None  # srun over an allocation with spare nodes: the tasks past the job's ranks wait
    # under Slurm the node's name, which scontrol drains: a node's hostname may differ from it
    name = env.get(control.NAME_ENV) or env.get("SLURMD_NODENAME") or socket.gethostname()
    if not env.get(control.NAME_ENV) and int(env.get("LOCAL_WORLD_SIZE", env.get("SLURM_NTASKS_PER_NODE", "1"))) > 1:
        name += f"/{env.get('LOCAL_RANK', env.get('SLURM_LOCALID', '0'))}"
    beat = env.get(control.BEAT_ENV) or socket.gethostbyname(socket.gethostname())  # the address gloo binds to
    return name, rank, beat


def elastic(module: torch.nn.Module, optimizer: torch.optim.Optimizer | OptimizerFactory, loader: Loader,
            **options: Any) -> Elastic:
    """The training loop's wrapper; see the module's docstring and docs/spares.md."""
    return Elastic(module, optimizer, loader, **options)
