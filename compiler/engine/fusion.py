"""Which graph nodes one engine descriptor executes (docs/architecture.md section 12).

A *job* is what one array (or the element-wise unit) does for one base: a core op,
optionally a threshold applied as the core's input is read (the *prologue*), and the
element-wise *epilogue* stages that follow it. A *group* is one descriptor: jobs of the
same shape that the K_hw arrays run side by side (in ``ceil(K/arrays)`` rounds).

Fusion rules, decided on ops and edges only (no node name is read):

1. A core is any node that is not absorbed by the rules below; its opcode follows its
   op (:data:`OPCODES`). Post-ops, adds, ReLUs and thresholds that stand alone are
   ``PIXEL`` cores (an identity core with the node as first epilogue stage).
2. Epilogue: a convolution whose only consumer is a max pooling pools on chip (its
   wide result never reaches DRAM), unless the pooling windows overlap (kernel >
   stride) and the target recomputes overlapping taps
   (``EngineConfig.fuse_overlapping_pools`` False: the core as built evaluates the
   convolution once per pooling tap, 2.25x the work of a 3x3/2 pooling's convolution).
   Then, from a job's last node, its only consumer is absorbed while that consumer
   is element-wise and comes later in the fixed stage order ``postop, add, relu,
   threshold`` than every stage absorbed so far, and the last node is not a
   multi-output node; an ``add`` reads its other operand (the *side* input) from DRAM.
   Wide accumulators therefore stay on chip: they leave a job only through a post-op, an
   add or a threshold.
3. Prologue: a threshold whose only consumer is a binary convolution, and that no
   producer absorbed as an epilogue, is applied by that convolution's window unit as it
   reads its input (the wide tensor is read once instead of written as bits and read),
   unless the target gathers wide elements slowly (``EngineConfig.prologue_thresholds``
   False: the core as built reads a 32-bit element per lane and the thresholds beside
   it, so a PIXEL descriptor writes the levels once and the convolution gathers packed
   bits, a whole tap of channels per read). A 1x1 convolution takes its prologue
   either way: its windows read each element at most once (a strided one, a quarter
   of them), so the gather thresholds no element twice, and the levels need not go to
   DRAM and back.
4. Groups: jobs with one opcode and equal geometry, formats and stage structure whose
   main inputs come from the same group (or the same node) form one descriptor, unless
   one depends on another. Descriptors are ordered topologically. Jobs without
   weights (every opcode but ``CONV``) may instead group only with jobs that read the
   same tensors (``EngineConfig.group_by_tensor``): such a group is split by input
   tensor, after the convolutions are grouped, so that each part reads its input
   once for all its jobs (``shared_input``) where the group read one tensor a job.
5. Base mixing on chip: a mixer (aggregation, soft gates) whose inputs are exactly the
   results of one convolution group, each read by the mixer alone, joins that group
   when the group runs in one round (K <= arrays): the K arrays' results meet in the
   mixer and only its outputs go to DRAM.
6. Fitting (the layout's, :func:`.layout.compile_engine`): a group whose one-row tile
   does not fit the on-chip buffers first gives up its mixer (:meth:`Group.unfused`:
   the bases' results go to DRAM, a MIXER descriptor mixes them), then runs as
   consecutive descriptors of as many jobs as fit (:meth:`Group.split`): the jobs take
   turns in the buffers, a shared input is read once per part. On the core as built
   (no rounds) a group also splits into parts of at most ``arrays`` jobs. On the
   engine of the units (no scratchpad) a group whose weights stream assembles its
   outputs in the map buffer: where its level outputs (rule 7) do not fit there, it
   gives up level tensors, each output's last first (:meth:`Group.fewer_levels`), and
   the convolutions that read them threshold its written outputs again.
7. Levels at the producer (``EngineConfig.levels_at_producer``): where a mixer's
   outputs are read by binary convolutions through their input thresholds (rule 3's
   prologues), the mixer's descriptor applies those thresholds and writes the levels
   (*level outputs*), and the convolutions read bits instead of wide maps. Where
   nothing else reads an output (a downsampling block's input: its shortcut and its
   first convolution threshold it, nothing adds it), only the levels are written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["Job", "Group", "fuse", "give_back_prologues", "OPCODES", "STAGES", "main_ref",
           "side_ref"]

#: core op -> descriptor opcode
OPCODES = {"input": "INPUT", "int_conv": "CONV", "bin_conv": "CONV", "maxpool": "MAXPOOL",
           "mixer": "MIXER", "gate": "GATE", "subsample": "SUBSAMPLE", "repeat": "REPEAT",
           "head": "HEAD", "postop": "PIXEL", "add": "PIXEL", "relu": "PIXEL",
           "threshold": "PIXEL"}

#: the element-wise epilogue's stages, in the order the hardware applies them
STAGES = ("postop", "add", "relu", "threshold")

#: opcodes whose jobs may be grouped (multi-input ops and the ends are one job each)
_GROUPABLE = {"CONV", "MAXPOOL", "PIXEL", "SUBSAMPLE", "REPEAT"}


@dataclass
class Job:
    """One base's work in a descriptor.

    Attributes
    ----------
    core : Node
        The core node (for a ``PIXEL`` job: the first epilogue stage).
    prologue : Node or None
        A threshold applied to the core's input as it is read.
    epilogue : list of Node
        Stages after the core, in :data:`STAGES` order.
    side_first : bool
        The ``add`` stage's side operand is the add's first input.
    pool : Node or None
        A max pooling of the convolution's result, on chip (before the epilogue).
    twin : Node or None
        Rule 7: a threshold equal to the one the convolution reads its input through,
        whose level tensor it reads instead (its producer writes one level tensor for
        equal thresholds of one output).
    """

    core: object
    prologue: object = None
    epilogue: list = field(default_factory=list)
    side_first: bool = False
    pool: object = None
    twin: object = None

    @property
    def opcode(self):
        return OPCODES[self.core.op]

    @property
    def nodes(self):
        """The job's nodes in execution order."""
        head = [self.prologue] if self.prologue is not None else []
        # a PIXEL job's core is its first epilogue stage
        core = [] if self.opcode == "PIXEL" else [self.core]
        pool = [self.pool] if self.pool is not None else []
        return head + core + pool + list(self.epilogue)

    @property
    def last(self):
        """The node whose value the job writes."""
        if self.epilogue:
            return self.epilogue[-1]
        return self.pool if self.pool is not None else self.core

    def add_node(self):
        return next((n for n in self.epilogue if n.op == "add"), None)


def main_ref(job):
    """References the job reads as its main input(s), in operand order."""
    if job.opcode == "INPUT":
        return []
    if job.twin is not None:
        return [job.twin.name]
    first = job.prologue if job.prologue is not None else job.core
    if job.opcode in ("MIXER", "GATE"):
        return list(first.inputs)
    if job.opcode == "PIXEL" and first.op == "add":
        # a stand-alone add: its main operand is the one that is not the side
        return [first.inputs[1] if job.side_first else first.inputs[0]]
    return [first.inputs[0]]


def side_ref(job, g):
    """The add stage's side operand, or None."""
    add = job.add_node()
    if add is None:
        return None
    return add.inputs[0] if job.side_first else add.inputs[1]


@dataclass
class Group:
    """One descriptor: ``jobs`` of one opcode, run side by side (bases) or in turn.

    ``mixer`` is a mixer that combines the jobs' results on chip (rule 5): the
    descriptor writes the mixer's outputs instead of the jobs'. ``levels`` (rule 7):
    per output of the descriptor, the thresholds it applies to that output and writes
    as level tensors of their own, all with the same number of levels; with
    ``levels_only`` nothing else reads the outputs, so only the levels are written.
    ``merged``: thresholds equal to one of ``levels``, whose readers read that one's
    level tensor (:attr:`Job.twin`).
    """

    jobs: list
    mixer: object = None
    levels: list = field(default_factory=list)
    levels_only: bool = False
    merged: list = field(default_factory=list)

    @property
    def opcode(self):
        return self.jobs[0].opcode

    @property
    def nodes(self):
        return ([n for j in self.jobs for n in j.nodes] + ([self.mixer] if self.mixer else [])
                + [t for ts in self.levels for t in ts] + self.merged)

    def split(self, most_jobs):
        """The same work as consecutive descriptors of at most ``most_jobs`` jobs each
        (rule 6); only a group whose jobs are independent (no mixer joins them, a
        groupable opcode) can be split."""
        if not self.splittable:
            raise ValueError(f"this {self.opcode} group's jobs cannot be split")
        return [Group(self.jobs[i:i + most_jobs]) for i in range(0, len(self.jobs), most_jobs)]

    def fewer_levels(self):
        """Rule 7 partly undone (rule 6's fitting): ``(group, thresholds)``, the group
        without the last of each output's level tensors, and those thresholds, which the
        convolutions that read them apply again as they read the outputs (their
        prologues, :func:`give_back_prologues`). The group writes its outputs again."""
        if not self.levels:
            raise ValueError("this group writes no level outputs")
        dropped = [ts[-1] for ts in self.levels]
        levels = [ts[:-1] for ts in self.levels]
        levels = levels if levels[0] else []
        merged = [t for t in self.merged if not any(_equal_thresholds(t, d) for d in dropped)]
        return Group(self.jobs, self.mixer, levels, False, merged), dropped

    def unfused(self):
        """Rule 5 undone: the convolutions' group, writing each base's result, then the
        mixer as its own descriptor (it joined only with no epilogue of its own)."""
        return [Group(self.jobs), Group([Job(core=self.mixer)], levels=self.levels,
                                        levels_only=self.levels_only, merged=self.merged)]

    @property
    def splittable(self):
        return len(self.jobs) > 1 and self.mixer is None and self.opcode in _GROUPABLE


def _absorbable(g, job, consumer, last, assigned, deferred, index):
    if consumer.name in assigned or consumer.name in deferred or consumer.op not in STAGES:
        return False
    done = [n.op for n in job.epilogue]
    rank = STAGES.index(consumer.op)
    if any(STAGES.index(op) >= rank for op in done):
        return False
    if consumer.height != last.height or consumer.width != last.width:
        return False
    refs = [r for r in consumer.inputs if g.source(r) == last.name]
    if len(refs) != 1 or refs[0] != last.name:
        return False
    if consumer.op == "add":
        other = consumer.inputs[1] if consumer.inputs[0] == last.name else consumer.inputs[0]
        # the add joins the job of the operand computed last (the other one is then
        # already in DRAM): a convolution's wide result rather than a shortcut
        if index[g.source(other)] > index[last.name]:
            return False
        # the side operand's channels may be fewer (option A) only as the add's second input
        if consumer.inputs[1] == last.name and g.producer(other).channels != consumer.channels:
            return False
    elif consumer.channels != last.channels:
        return False
    return True


def _pools_on_chip(pool, overlapping_pools):
    return overlapping_pools or pool.attrs["kernel"] <= pool.attrs["stride"]


def _grow_epilogue(g, job, assigned, deferred, index, overlapping_pools):
    core = job.core
    if core.op in ("int_conv", "bin_conv"):
        users = g.consumers(core.name)
        if (len(users) == 1 and users[0].op == "maxpool" and users[0].inputs == [core.name]
                and users[0].name not in assigned
                and _pools_on_chip(users[0], overlapping_pools)):
            # rule 2b: the convolution's wide result is pooled on chip
            job.pool = users[0]
            assigned.add(users[0].name)
    while True:
        last = job.last
        if last.outputs != 1 or last.op == "threshold":
            return
        users = g.consumers(last.name)
        if len(users) != 1 or not _absorbable(g, job, users[0], last, assigned, deferred, index):
            return
        c = users[0]
        if c.op == "add":
            job.side_first = c.inputs[1] == last.name
        job.epilogue.append(c)
        assigned.add(c.name)


def _jobs(g, overlapping_pools=True, prologues=True):
    """Every node in exactly one job (rules 1-3)."""
    assigned, jobs = set(), []
    index = {n.name: i for i, n in enumerate(g)}
    # rule 3's candidates: thresholds that only a binary convolution reads (a 1x1 one's
    # window thresholds each element once at most: always)
    prologue_of = {}
    for n in g:
        if n.op == "bin_conv" and (prologues or n.attrs.get("kernel", 1) == 1):
            p = g.producer(n.inputs[0])
            if (p.op == "threshold" and n.inputs[0] == p.name
                    and [c.name for c in g.consumers(p.name)] == [n.name]):
                prologue_of[p.name] = n.name
    deferred = set()
    for n in g:
        if n.name in assigned:
            continue
        if n.name in prologue_of:
            # not absorbed by its producer's epilogue: its convolution reads it (rule 3)
            deferred.add(n.name)
            continue
        job = Job(core=n)
        if n.op not in OPCODES:
            raise ValueError(f"{n.name}: the engine has no unit for op {n.op!r}")
        assigned.add(n.name)
        if n.op in STAGES:
            # a stand-alone element-wise node: an identity core with this first stage
            job.epilogue.append(n)
        if n.op == "bin_conv" and g.source(n.inputs[0]) in deferred:
            job.prologue = g.producer(n.inputs[0])
            deferred.discard(job.prologue.name)
            assigned.add(job.prologue.name)
        if n.op != "input":
            _grow_epilogue(g, job, assigned, deferred, index, overlapping_pools)
        jobs.append(job)
    # a deferred threshold whose convolution was absorbed elsewhere cannot happen
    # (a convolution is always a core), but say so if it does
    if deferred:
        raise AssertionError(f"thresholds left unassigned: {sorted(deferred)}")
    return jobs


def _signature(job):
    """What must agree for jobs to share one descriptor."""
    def shape(n):
        # formats are unified per group (the widest container), so only the container
        # class matters here; per-job constants (shifts, thresholds) live in the
        # job's parameter block
        return (n.op, n.channels, n.height, n.width, n.kind, n.bits, n.outputs)

    def attrs(n):
        a = n.attrs
        if n.op == "postop":
            return ()
        if n.op == "threshold":
            return tuple(a["T"].shape)
        if n.op in ("bin_conv", "int_conv"):
            w = a.get("bits", a.get("weight"))
            return (tuple(w.shape), a["kernel"], a["stride"], a["dilation"], a["padding"],
                    a.get("in_bits"), a.get("groups", 1))
        return tuple(sorted((k, v) for k, v in a.items() if isinstance(v, (int, bool))))
    return (job.opcode, job.side_first,
            tuple((shape(n), attrs(n)) for n in job.nodes))


def _ancestors(g):
    """Node name -> bitset (int) of its ancestors and itself."""
    index = {n.name: i for i, n in enumerate(g)}
    anc = {}
    for n in g:
        bits = 1 << index[n.name]
        for r in n.inputs:
            bits |= anc[g.source(r)]
        anc[n.name] = bits
    return anc, index


def _group(g, jobs):
    anc, index = _ancestors(g)
    job_of = {n.name: i for i, j in enumerate(jobs) for n in j.nodes}
    group_of = {}

    def source_key(job):
        refs = main_ref(job)
        keys = []
        for r in refs:
            src = g.source(r)
            keys.append(("group", group_of[job_of[src]]) if job_of[src] in group_of
                        else ("node", src))
        return tuple(keys)

    def job_bits(job):
        b = 0
        for n in job.nodes:
            b |= 1 << index[n.name]
        return b

    groups = []
    sigs = [_signature(j) for j in jobs]
    bits = [job_bits(j) for j in jobs]
    ancs = [0] * len(jobs)
    for i, j in enumerate(jobs):
        a = 0
        for n in j.nodes:
            a |= anc[n.name]
        ancs[i] = a & ~bits[i]
    for i, j in enumerate(jobs):
        if i in group_of:
            continue
        members = [i]
        if j.opcode in _GROUPABLE:
            key = source_key(j)
            for k in range(i + 1, len(jobs)):
                if k in group_of or sigs[k] != sigs[i]:
                    continue
                # main inputs from the same group, and no member depends on another
                if source_key(jobs[k]) != key:
                    continue
                if any(ancs[k] & bits[m] or ancs[m] & bits[k] for m in members):
                    continue
                members.append(k)
        for m in members:
            group_of[m] = len(groups)
        groups.append(members)
    return _order(g, jobs, groups, job_of, index)


def _order(g, jobs, groups, job_of, index):
    """Groups in a topological order of their dependencies (Kahn, earliest node
    first); a group caught in a cycle between groups is split into single jobs."""
    while True:
        group_of = {m: gi for gi, members in enumerate(groups) for m in members}
        deps = []
        for members in groups:
            d = set()
            for m in members:
                for n in jobs[m].nodes:
                    for r in n.inputs:
                        src = job_of[g.source(r)]
                        if group_of[src] != group_of[m]:
                            d.add(group_of[src])
            deps.append(d)
        first = [min(index[n.name] for m in members for n in jobs[m].nodes) for members in groups]
        done, order = set(), []
        ready = sorted((first[i], i) for i in range(len(groups)) if not deps[i])
        pending = {i for i in range(len(groups)) if deps[i]}
        while ready:
            _, gi = ready.pop(0)
            done.add(gi)
            order.append(gi)
            for p in sorted(pending):
                if deps[p] <= done:
                    pending.discard(p)
                    ready.append((first[p], p))
            ready.sort()
        if not pending:
            return [Group([jobs[m] for m in groups[gi]]) for gi in order]
        # split the largest group on a cycle and try again
        worst = max(pending, key=lambda gi: len(groups[gi]))
        if len(groups[worst]) == 1:
            raise AssertionError("descriptor dependencies form a cycle of single jobs")
        groups = [members for gi, members in enumerate(groups) if gi != worst] + \
            [[m] for m in groups[worst]]


def _by_tensor(grp):
    """A group of jobs without weights as one group per input tensor (rule 4), in the
    order of their first jobs; others whole. The parts keep the group's place in the
    order: no job of one part depends on another's."""
    if grp.opcode == "CONV" or grp.mixer is not None:
        return [grp]
    parts = {}
    for job in grp.jobs:
        parts.setdefault(tuple(main_ref(job)), []).append(job)
    return [grp] if len(parts) == 1 else [Group(jobs) for jobs in parts.values()]


def _mix_on_chip(g, groups, arrays):
    """Rule 5: a mixer over exactly one convolution group's results joins it."""
    by_last = {}
    for gi, grp in enumerate(groups):
        for j in grp.jobs:
            by_last[j.last.name] = gi
    out = []
    absorbed = set()
    for gi, grp in enumerate(groups):
        if gi in absorbed:
            continue
        if grp.opcode == "MIXER" and grp.jobs[0].epilogue == []:
            mixer = grp.jobs[0].core
            srcs = {by_last.get(r) for r in mixer.inputs}
            if len(srcs) == 1 and None not in srcs:
                (src,) = srcs
                conv = groups[src]
                lasts = {j.last.name: j for j in conv.jobs}
                if (conv.opcode == "CONV" and conv.mixer is None and len(conv.jobs) <= arrays
                        and sorted(mixer.inputs) == sorted(lasts)
                        and len(set(mixer.inputs)) == len(mixer.inputs)
                        and all([c.name for c in g.consumers(r)] == [mixer.name]
                                for r in mixer.inputs)):
                    # jobs in the mixer's input order: array k holds base k
                    conv.jobs = [lasts[r] for r in mixer.inputs]
                    conv.mixer = mixer
                    continue
        out.append(grp)
    return out


def _levels_at_producer(g, groups):
    """Rule 7: a mixer's outputs thresholded where they are computed. Each output's
    thresholds that a binary convolution applies as its prologue move to the mixer's
    group, which writes their levels; the convolutions read those, one level tensor
    for equal thresholds (a downsampling block's shortcut and first convolution
    threshold its input alike: :attr:`Job.twin`). Only where every output of the
    mixer has the same number of them, with the same levels a channel (one descriptor
    format for the level tensors); ``levels_only`` where nothing else reads the
    outputs."""
    prologue_job = {j.prologue.name: j for grp in groups for j in grp.jobs
                    if j.prologue is not None}
    for grp in groups:
        mixer = grp.mixer if grp.mixer is not None else (
            grp.jobs[0].core if grp.opcode == "MIXER" and not grp.jobs[0].epilogue else None)
        if mixer is None:
            continue
        refs = [mixer.name] if mixer.outputs == 1 else \
            [f"{mixer.name}:{k}" for k in range(mixer.outputs)]
        users = g.consumers(mixer.name)
        levels, others = [], False
        for ref in refs:
            readers = [u for u in users if ref in u.inputs]
            moved = [u for u in readers if u.op == "threshold" and u.inputs == [ref]
                     and u.name in prologue_job]
            # the thresholds of convolutions of the widest windows first: fitting gives
            # up the last (a 1x1 convolution reads a wide map once; a 3x3 one whose
            # weights stream reads it again for every chunk)
            levels.append(sorted(moved, key=lambda t: -prologue_job[t.name].core.attrs.get(
                "kernel", 1)))
            others = others or len(moved) < len(readers)
        distinct = [_distinct_thresholds(ts) for ts in levels]
        shapes = {tuple(t.attrs["T"].shape) for ts in levels for t in ts}
        if not levels[0] or len({len(ts) for ts in distinct}) != 1 or len(shapes) != 1:
            continue
        for ts, unique in zip(levels, distinct):
            for t in ts:
                job = prologue_job.pop(t.name)
                job.prologue = None
                twin = next(u for u in unique if _equal_thresholds(u, t))
                job.twin = twin if twin is not t else None
        grp.levels, grp.levels_only = distinct, not others
        kept = {t.name for ts in distinct for t in ts}
        grp.merged = [t for ts in levels for t in ts if t.name not in kept]
    return groups


def _equal_thresholds(a, b):
    """Whether two thresholds of one input give the same levels."""
    return a.inputs == b.inputs and all(
        torch.equal(a.attrs[k], b.attrs[k]) for k in ("T", "invert"))


def _distinct_thresholds(ts):
    """``ts`` without those equal to one before them."""
    kept = []
    for t in ts:
        if not any(_equal_thresholds(u, t) for u in kept):
            kept.append(t)
    return kept


def give_back_prologues(groups, thresholds, g):
    """The binary convolutions of ``groups`` that read the level tensors of
    ``thresholds`` apply their thresholds again as they read (rule 3's prologues; a
    twin's reader its own)."""
    given_up = {t.name for t in thresholds}
    for grp in groups:
        for job in grp.jobs:
            if job.prologue is None and job.core.op == "bin_conv" and main_ref(job)[0] in given_up:
                job.prologue, job.twin = g.producer(job.core.inputs[0]), None


def fuse(g, arrays=None, overlapping_pools=True, prologues=True, by_tensor=False,
         levels_at_producer=False):
    """The graph's nodes as descriptor groups in execution order.

    Parameters
    ----------
    g : Graph
    arrays : int, optional
        K_hw: a group of at most this many jobs mixes its bases on chip (rule 5);
        None: never.
    overlapping_pools : bool
        A convolution also pools on chip when its pooling windows overlap (rule 2).
    prologues : bool
        A threshold that only a binary convolution reads is applied as the convolution
        reads its input (rule 3); False: it is a PIXEL descriptor that writes levels,
        unless the convolution is 1x1.
    by_tensor : bool
        Jobs without weights group only with jobs that read the same tensors (rule 4).
    levels_at_producer : bool
        A mixer applies the input thresholds of the binary convolutions that read its
        outputs and writes their levels (rule 7).

    Returns
    -------
    list of Group
        Every node of ``g`` is in exactly one job of one group.
    """
    with g.unchanged():
        jobs = _jobs(g, overlapping_pools, prologues)
        groups = _group(g, jobs)
        if arrays:
            groups = _mix_on_chip(g, groups, arrays)
        if by_tensor:
            groups = [part for grp in groups for part in _by_tensor(grp)]
        if levels_at_producer:
            groups = _levels_at_producer(g, groups)
    seen = [n.name for grp in groups for n in grp.nodes]
    if sorted(seen) != sorted(n.name for n in g) or len(seen) != len(set(seen)):
        raise AssertionError("fusion did not place every node exactly once")
    return groups
