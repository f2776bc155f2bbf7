"""Swapping rewritten objects into a versioned file so that a crash leaves it whole.

The operations that rewrite a file (:mod:`.delete`, :mod:`.metadata`,
:mod:`.rebuild`) write every new object first into the scratch group
``_version_data/__vhdf5_scratch__`` (:data:`SCRATCH`, invisible to both
libraries), with a journal (an attribute) of where each belongs, then flush
(:func:`_barrier`) before linking anything: what reaches the disk is what the
last flush wrote, so a crash between barriers leaves the previous state intact.

A swap is two link moves (old -> scratch, new -> its place); groups whose links track
creation order get their later members moved out and back too, so datasets keep
their order (:func:`relink_plan`, :meth:`Scratch.replace_members`). A crash between
the two moves of a swap leaves a name missing: the next
:func:`~xarray_vhdf5._versions.delete.delete_versions` or
:func:`~xarray_vhdf5._versions.metadata.modify_metadata` first replays the journal
(:meth:`Scratch.recover`: moves each pending object whose destination is missing
into place) and deletes the scratch group. Dimension-scale attachments are
references to objects, so they are recorded before a swap and made again after it
(:func:`_attachment_plan`, :func:`_reattach`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

import h5py
from h5py import h5o

from .._backend.h5objects import count_one_more_link, object_address
from .._backend.layout import VERSION_DATA

__all__ = ["SCRATCH", "Scratch", "relink_plan"]

#: Group (inside ``_version_data``) holding objects that are not yet, or no longer, linked.
SCRATCH = "__vhdf5_scratch__"


#: Called with the stage name after every barrier's flush (crash-injection tests).
_barrier_hook: Callable[[str], None] | None = None


def _barrier(h5file: h5py.Group, stage: str) -> None:
    """Flush: everything before reaches the file before anything after is written."""
    h5file.file.flush()
    if _barrier_hook is not None:
        _barrier_hook(stage)


def _str(value) -> str:
    """An attribute's string value (h5py gives bytes for fixed-length strings)."""
    return value.decode() if isinstance(value, bytes) else str(value)


class Scratch:
    """The scratch group: new objects waiting to be linked in, and old ones unlinked.

    ``reserve(target)`` names a slot for an object meant to end at ``target``; the
    journal of (slot, target) pairs is written by :meth:`write_journal` before the
    barrier that ends epoch A, so :meth:`recover` can finish an interrupted swap.
    """

    def __init__(self, h5file: h5py.Group):
        self.f = h5file
        self.path = f"/{VERSION_DATA}/{SCRATCH}"
        self.journal: list[tuple[str, str]] = []
        self._count = 0
        self._group: h5py.Group | None = None

    @property
    def group(self) -> h5py.Group:
        if self._group is None:
            self._group = self.f.require_group(self.path)
        return self._group

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def reserve(self, target: str) -> str:
        """Name (in the scratch group) of an object that will be moved to ``target``."""
        name = self._name("pending")
        self.journal.append((name, target))
        return name

    def write_journal(self) -> None:
        self.group.attrs["journal"] = json.dumps(self.journal)

    def move_in(self, name: str, target: str) -> None:
        """Move scratch object ``name`` to ``target``, the object there (if any) to the trash."""
        if target in self.f:
            self.f.move(target, f"{self.path}/{self._name('trash')}")
        self.f.move(f"{self.path}/{name}", target)

    def replace_members(self, parent_path: str, new: dict[str, str], relink: dict[str, str]) -> None:
        """Replace members ``new`` (member -> scratch name) of a group, keeping link order.

        ``relink`` (member -> reserved scratch name) lists the members after the first
        replaced one in a group that tracks creation order (see :func:`relink_plan`):
        they are moved out and back in their order, after the replaced ones.
        """
        order = [n for n in list(self.f[parent_path]) if n in new or n in relink]
        for n in order:
            tmp = relink.get(n) or self._name("trash")
            self.f.move(f"{parent_path}/{n}", f"{self.path}/{tmp}")
        for n in order:
            self.f.move(f"{self.path}/{new.get(n) or relink[n]}", f"{parent_path}/{n}")

    def remove(self) -> None:
        if self.path in self.f:
            del self.f[self.path]

    @classmethod
    def recover(cls, h5file: h5py.Group) -> bool:
        """Finish the swaps an interrupted run left half done, then delete the scratch group.

        Returns True when there was a scratch group.
        """
        path = f"/{VERSION_DATA}/{SCRATCH}"
        if path not in h5file:
            return False
        group = h5file[path]
        for name, target in json.loads(_str(group.attrs.get("journal", "[]"))):
            parent = target.rsplit("/", 1)[0] or "/"
            if name in group and parent in h5file and target not in h5file:
                h5file.move(f"{path}/{name}", target)
            elif name in group and target in h5file:
                _count_torn_link(group[name], h5file[target])
        del h5file[path]
        _barrier(h5file, "recovered")
        return True


def _count_torn_link(member, target) -> None:
    """Before the scratch group goes: a member that is also linked at its target must survive it.

    A move into place torn by a kill inside libhdf5's flush of a plain handle
    can leave the object linked both here and at its target while its header
    counts one link (measured: a ``modify_metadata`` killed so, whose six
    versions' datasets were freed by the recovery and read "bad heap pointer"
    after). One link more is counted first, so deleting the scratch group
    leaves the object to the version that links it.
    """
    if object_address(member.id) != object_address(target.id):
        return
    if h5o.get_info(member.id).rc < 2:
        count_one_more_link(member.id)


def relink_plan(h5file: h5py.Group, parent_path: str, replaced: Iterable[str], scratch: Scratch) -> dict[str, str]:
    """Members of ``parent_path`` to move out and back so replaced ones keep their place.

    Only for groups that track link creation order (xarray_vhdf5 creates version
    groups so, for netCDF's variable order); others list names alphabetically.
    """
    parent = h5file[parent_path]
    if not parent.id.get_create_plist().get_link_creation_order():
        return {}
    names = list(parent)
    replaced = set(replaced)
    first = min(names.index(n) for n in replaced)
    return {n: scratch.reserve(f"{parent_path}/{n}") for n in names[first:] if n not in replaced}


_ATTACHMENTS = ("DIMENSION_LIST", "REFERENCE_LIST")


def _version_datasets(group: h5py.Group, prefix: str = ""):
    """``(path inside the version, dataset)`` of every dataset hard-linked under ``group``."""
    for key in group:
        if not isinstance(group.get(key, getlink=True), h5py.HardLink):
            continue
        obj = group[key]
        if isinstance(obj, h5py.Dataset):
            yield prefix + key, obj
        elif isinstance(obj, h5py.Group):
            yield from _version_datasets(obj, f"{prefix}{key}/")


def _attachment_plan(group: h5py.Group) -> dict[str, list[str | None]]:
    """Per dataset of a version with a ``DIMENSION_LIST``: per axis, the path (inside the version) of its scale.

    Read before a deletion replaces some of the version's datasets: the
    references name the objects replaced, which the deletion frees.
    """
    own = group.name + "/"
    plan: dict[str, list[str | None]] = {}
    for rel, dset in _version_datasets(group):
        if "DIMENSION_LIST" not in dset.attrs:
            continue
        axes: list[str | None] = []
        for refs_of_axis in dset.attrs["DIMENSION_LIST"]:
            target = None
            for ref in refs_of_axis[:1]:
                try:
                    name = group.file[ref].name or ""
                except (KeyError, ValueError, OSError):  # already dangling
                    name = ""
                target = name[len(own) :] if name.startswith(own) else None
            axes.append(target)
        plan[rel] = axes
    return plan


def _reattach(group: h5py.Group, plan: dict[str, list[str | None]]) -> None:
    """Attach each dataset of ``plan`` to its scales again (lists of every dataset of the version rebuilt)."""
    members = list(_version_datasets(group))
    for _, dset in members:
        for key in _ATTACHMENTS:
            if key in dset.attrs:
                del dset.attrs[key]
    for rel, axes in plan.items():
        dset = group.get(rel)
        if not isinstance(dset, h5py.Dataset):
            continue
        for axis, target in enumerate(axes):
            scale = group.get(target) if target else None
            if (
                isinstance(scale, h5py.Dataset)
                and scale.id != dset.id
                and h5py.h5ds.is_scale(scale.id)
                and axis < dset.ndim
                and scale.shape == (dset.shape[axis],)
            ):
                h5py.h5ds.attach_scale(dset.id, scale.id, axis)
