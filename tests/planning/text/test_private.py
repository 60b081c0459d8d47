"""launcher.planning.text.private: files 0600 and folders 0700 whatever the umask."""

from __future__ import annotations

import os
import stat

from launcher.planning.text.private import makedirs_private, open_private


def test_files_are_0600_and_folders_0700_under_any_umask(tmp_path):
    for umask in (0o000, 0o022, 0o077):
        old = os.umask(umask)
        try:
            path = tmp_path / f"log{umask:o}"
            os.close(open_private(str(path)))
            folder = tmp_path / f"dir{umask:o}" / "report"
            makedirs_private(str(folder))
        finally:
            os.umask(old)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, umask
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, umask


def test_append_keeps_and_truncate_drops_what_was_there(tmp_path):
    path = str(tmp_path / "f")
    for append, text in ((True, b"a"), (True, b"b"), (False, b"c")):
        fd = open_private(path, append=append)
        os.write(fd, text)
        os.close(fd)
    assert open(path, "rb").read() == b"c"
    fd = open_private(path)
    os.write(fd, b"d")
    os.close(fd)
    assert open(path, "rb").read() == b"cd"
