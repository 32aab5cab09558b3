"""Files tumbler writes or trusts, where another user may have a hand in
the path (tumbler(8), SECURITY; SECURITY.md).

tumbler often runs as root, and root writes where an admin points it:
a metrics file in a directory a ``prometheus`` group shares, ``--log`` in
``/tmp``.  Whoever else can write a directory on the way can plant a
symbolic link there, or swap a directory for a link, and have root
truncate, write or chmod a file of their choosing.  So every path tumbler
writes to, and every file it takes code or settings from (configuration,
state files, probe scripts), is resolved here, component by component
from ``/``, each directory opened with ``O_NOFOLLOW`` relative to the one
before (no name is looked up twice), with these rules:

* every directory on the way belongs to root or to the user tumbler runs
  as (the *trusted* users): another owner could rename what is inside;
* a directory others may write (group or other write bit) must be sticky
  (``/tmp``): there only an entry's owner can rename or remove it, so the
  next component, a symbolic link included, must belong to a trusted
  user -- the rule Linux's ``fs.protected_symlinks`` applies, enforced
  here whether or not that sysctl is on;
* a symbolic link elsewhere is followed (only trusted users could have
  made it), 40 at most;
* the file itself is opened with ``O_NOFOLLOW`` (a link in its place is
  refused, never followed) and ``O_NONBLOCK`` (a FIFO cannot hang the
  caller) and must be a regular file; in a directory others may write it
  must be tumbler's own with one link (no hard link to a file of
  someone else's), checked before it is truncated.  An output the user
  named (``--log``, ``--summary-json``, ``plot -o``) may also be a device
  or FIFO, and a link a trusted user made in its place is followed
  (``/dev/stdout``), outside directories others may write;
* a new file is written as a temporary of a random name created with
  ``O_EXCL`` in the same directory, then renamed over the old one: a
  reader sees the old file or the new one, and nothing is chmod'ed but
  the descriptor tumbler created;
* a file tumbler *trusts* (configuration, state, probe scripts) must
  also belong to a trusted user and not be writable by others, as sshd's
  StrictModes and sudo ask of theirs.

What remains: root's own mistakes (a trusted user's link pointing where
it should not) and the directories' owners themselves.  Everything else
is refused with one line naming the path and the reason (UnsafePath).
"""

import errno
import os
import stat

from .errors import EXIT_FAILURE, TumblerError

#: Symbolic links followed while resolving one path (the kernel's own limit).
MAX_LINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(TumblerError):
    """A path tumbler will not write to or trust; the message says why."""

    status = EXIT_FAILURE


def trusted_uids():
    """Users whose files and directories tumbler trusts: root and itself."""
    return {0, os.geteuid()}


def others_may_write(info):
    return bool(info.st_mode & 0o022)


def _refuse(path, reason):
    raise UnsafePath("%s: %s" % (path, reason))


class NotAFile(UnsafePath):
    """A path that is a directory, a device, a FIFO or a socket, where a
    regular file was asked for: a mistake more than a danger."""


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
          (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def _refuse_kind(path, mode):
    kind = next((name for test, name in _KINDS if test(mode)), "something")
    raise NotAFile("%s: %s, not a regular file" % (path, kind))


class TooLarge(UnsafePath):
    """A file larger than its reader's limit."""


class Directory:
    """An open directory every component of whose path passed the rules
    of the module doc.  ``shared``: others may write it (it is sticky),
    so what is in it must be tumbler's own.  Use as a context manager, or
    ``close()``."""

    __slots__ = ("path", "fd", "shared")

    def __init__(self, path, fd, shared):
        self.path = path
        self.fd = fd
        self.shared = shared

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def name_of(self, name):
        return os.path.join(self.path, name)

    def entry(self, name):
        """lstat of ``name`` in this directory, or None if there is none."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def open_file(self, name, flags, mode=0o600, trusted=False, output=False):
        """An fd of the regular file ``name`` (``flags``: O_RDONLY, or
        O_WRONLY/O_RDWR with O_CREAT/O_APPEND; never truncated here),
        checked as the module doc says; ``trusted``: it must also belong
        to a trusted user and not be writable by others.

        ``output``: a file the user named to write to, which may also be
        a device or a FIFO (``/dev/null``, ``/dev/stdout``) outside a
        shared directory, and a link a trusted user made is followed
        there (``/dev/stdout`` is one)."""
        path = self.name_of(name)
        nofollow = os.O_NOFOLLOW
        if output:
            info = self.entry(name)
            if info is not None and stat.S_ISLNK(info.st_mode):
                if self.shared and info.st_uid not in trusted_uids():
                    _refuse(path, "symbolic link of uid %d in %s, a directory others may "
                            "write; tumbler does not follow it" % (info.st_uid, self.path))
                nofollow = 0
        try:
            fd = os.open(name, flags | nofollow | os.O_NONBLOCK | os.O_CLOEXEC, mode,
                         dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                _refuse(path, "a symbolic link; tumbler does not follow it here")
            if exc.errno == errno.ENXIO:
                raise NotAFile("%s: not a regular file" % path)
            raise
        try:
            info = os.fstat(fd)
            if not (stat.S_ISREG(info.st_mode) or output and not self.shared
                    and (stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode))):
                _refuse_kind(path, info.st_mode)
            if self.shared and (info.st_uid != os.geteuid() or info.st_nlink != 1):
                _refuse(path, "belongs to uid %d or has other links, in %s, a directory "
                        "others may write" % (info.st_uid, self.path))
            if trusted:
                _check_trusted_file(path, info)
            if flags & os.O_NONBLOCK == 0:
                import fcntl
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read(self, name, limit, trusted=False):
        """The bytes of the regular file ``name`` (``limit`` at most: an
        UnsafePath beyond it)."""
        fd = self.open_file(name, os.O_RDONLY, trusted=trusted)
        try:
            if os.fstat(fd).st_size > limit:
                raise TooLarge("%s: larger than %d bytes" % (self.name_of(name), limit))
            chunks, size = [], 0
            while size <= limit:
                chunk = os.read(fd, limit + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
        if size > limit:
            raise TooLarge("%s: larger than %d bytes" % (self.name_of(name), limit))
        return b"".join(chunks)

    def write_atomic(self, name, payload, mode=0o600, sync=False):
        """Replace ``name`` with the bytes ``payload``: a new file of a
        random name (O_EXCL, ``mode``), renamed over it."""
        if self.shared:
            old = self.entry(name)
            if old is not None and (old.st_uid != os.geteuid() or not stat.S_ISREG(old.st_mode)):
                _refuse(self.name_of(name), "belongs to uid %d or is not a regular file, in %s, "
                        "a directory others may write" % (old.st_uid, self.path))
        tmp = ".%s.%s.tmp" % (name, os.urandom(6).hex())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode, dir_fd=self.fd)
        try:
            if mode & 0o077:
                os.fchmod(fd, mode)         # past the umask; the file is the one just made
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            if sync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            self.unlink(tmp)
            raise
        os.close(fd)
        try:
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            self.unlink(tmp)
            raise

    def unlink(self, name):
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def listdir(self):
        return os.listdir(self.fd)

    def enter(self, name):
        """The Directory ``name`` inside this one (no link followed)."""
        path = self.name_of(name)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:        # a link put there since it was looked at
                _refuse(path, "a symbolic link; tumbler does not follow it here")
            raise
        try:
            shared = _check_directory(path, os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        return Directory(path, fd, shared)


def _check_directory(path, info):
    """Whether a directory on the way is shared (others may write it);
    UnsafePath if it is not one tumbler may trust."""
    if info.st_uid not in trusted_uids():
        _refuse(path, "directory belongs to uid %d, who could swap what tumbler "
                "writes or reads there" % info.st_uid)
    if others_may_write(info):
        if not info.st_mode & stat.S_ISVTX:
            _refuse(path, "directory others may write (mode %o, not sticky)"
                    % stat.S_IMODE(info.st_mode))
        return True
    return False


def _check_trusted_file(path, info):
    if info.st_uid not in trusted_uids():
        _refuse(path, "belongs to uid %d; tumbler trusts only files of root's%s"
                % (info.st_uid, "" if os.geteuid() == 0 else " or uid %d's" % os.geteuid()))
    if others_may_write(info):
        _refuse(path, "writable by others (mode %o)" % stat.S_IMODE(info.st_mode))


def open_directory(path):
    """The Directory ``path``, resolved by the rules of the module doc."""
    return _resolve(os.path.abspath(path), want_directory=True)[0]


def open_parent(path, follow_last=False):
    """(Directory holding ``path``'s last component, that name).
    ``follow_last``: a link in the last place (which the rules allow) is
    followed to what it names -- a configuration file under configuration
    management; otherwise the name is returned as it is, to be opened
    with O_NOFOLLOW."""
    path = os.path.abspath(path)
    if path.endswith("/") or os.path.basename(path) in ("", ".", ".."):
        _refuse(path, "names a directory, not a file")
    return _resolve(path, want_directory=False, follow_last=follow_last)


def _resolve(path, want_directory, follow_last=False):
    """Walk ``path`` from ``/`` by the module doc's rules: (the Directory
    it names, None) if ``want_directory``, else (the Directory of its last
    component, that name)."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    current = _root()
    links = 0
    try:
        while parts:
            name = parts.pop(0)
            last = not parts
            if name == "..":
                nxt = current.enter("..")
                nxt.path = os.path.dirname(current.path)
                current.close()
                current = nxt
                continue
            info = current.entry(name)
            if info is not None and stat.S_ISLNK(info.st_mode) and \
                    (want_directory or not last or follow_last):
                if current.shared and info.st_uid not in trusted_uids():
                    _refuse(current.name_of(name), "symbolic link of uid %d in %s, a "
                            "directory others may write" % (info.st_uid, current.path))
                links += 1
                if links > MAX_LINKS:
                    _refuse(path, "too many symbolic links")
                target = os.readlink(name, dir_fd=current.fd)
                parts[:0] = [p for p in target.split("/") if p not in ("", ".")]
                if target.startswith("/"):
                    current.close()
                    current = _root()
                continue
            if last and not want_directory:
                return current, name
            if info is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT),
                                        current.name_of(name))
            if current.shared and info.st_uid not in trusted_uids():
                _refuse(current.name_of(name), "belongs to uid %d, in %s, a directory "
                        "others may write" % (info.st_uid, current.path))
            nxt = current.enter(name)
            current.close()
            current = nxt
        if not want_directory:          # the path named / or ended in ..
            _refuse(path, "names a directory, not a file")
        return current, None
    except BaseException:
        current.close()
        raise


def _root():
    fd = os.open("/", _DIR_FLAGS)
    try:
        shared = _check_directory("/", os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return Directory("/", fd, shared)


# -- what callers use ----------------------------------------------------------

def write_atomic(path, payload, mode=0o600, sync=False):
    """Replace the file ``path`` with ``payload`` (Directory.write_atomic)."""
    directory, name = open_parent(path)
    with directory:
        directory.write_atomic(name, payload, mode, sync)


def open_output(path, append=False, mode=0o644):
    """A text file object to write ``path`` (created ``mode``; emptied
    unless ``append``), opened by the rules of the module doc: for
    ``--log``, ``--summary-json``, ``plot -o`` (Directory.open_file's
    ``output``)."""
    directory, name = open_parent(path)
    with directory:
        fd = directory.open_file(name, os.O_WRONLY | os.O_CREAT
                                 | (os.O_APPEND if append else 0), mode, output=True)
    try:
        if not append and stat.S_ISREG(os.fstat(fd).st_mode):
            os.ftruncate(fd, 0)
        return os.fdopen(fd, "a" if append else "w", buffering=1)
    except BaseException:
        os.close(fd)
        raise


def read_trusted(path, limit):
    """The bytes of ``path``, a file tumbler takes settings or code from:
    it and every directory on its way must pass the rules of the module
    doc, and it must belong to a trusted user and not be writable by
    others."""
    directory, name = open_parent(path, follow_last=True)
    with directory:
        return directory.read(name, limit, trusted=True)


def private_directory(path, create=True):
    """The Directory ``path``, the caller's own and not writable by others
    (a state directory), created 0700 -- with any missing parent -- if
    missing and ``create`` (else FileNotFoundError); a link on the way is
    followed only where the module doc's rules allow."""
    try:
        directory = open_directory(path)
    except FileNotFoundError:
        if not create:
            raise
        path = os.path.abspath(path)
        parent_path, name = os.path.split(path)
        with private_directory(parent_path) if not os.path.lexists(parent_path) \
                else open_directory(parent_path) as parent:
            try:
                os.mkdir(name, 0o700, dir_fd=parent.fd)
            except FileExistsError:
                pass
        directory = open_directory(path)
    try:
        info = os.fstat(directory.fd)
        if info.st_uid != os.geteuid() or others_may_write(info):
            _refuse(directory.path, "belongs to uid %d, mode %o: it must be uid %d's and "
                    "not writable by others" % (info.st_uid, stat.S_IMODE(info.st_mode),
                                                os.geteuid()))
    except BaseException:
        directory.close()
        raise
    return directory


def check_directory(path):
    """UnsafePath unless ``path`` and every directory above it pass the
    rules of the module doc (a directory named by an environment variable
    such as TMPDIR); returns the path."""
    open_directory(path).close()
    return path


def checked_tempdir():
    """The temporary directory (TMPDIR, else /tmp), once it passes the
    module doc's rules: what tumbler puts there, root may run."""
    import tempfile
    base = tempfile.gettempdir()
    try:
        return check_directory(base)
    except UnsafePath as exc:
        raise UnsafePath("temporary directory (TMPDIR) %s" % exc) from None


def private_tempdir(prefix):
    """A new directory of the caller's own (0700, random name) in
    ``checked_tempdir()``: probe scripts and FIFOs go there."""
    import tempfile
    return tempfile.mkdtemp(prefix=prefix, dir=checked_tempdir())
