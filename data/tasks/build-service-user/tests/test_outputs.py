import os
import pwd
import stat


def test_account_exists():
    p = pwd.getpwnam("appsvc")
    assert p.pw_uid == 1500 and p.pw_gid == 1500
    assert p.pw_dir == "/home/appsvc"


def test_build_step_ran_as_the_user():
    st = os.stat("/home/appsvc/build-marker")
    assert st.st_uid == 1500
    with open("/home/appsvc/build-marker") as f:
        assert f.read() == "built as appsvc in /home/appsvc\n"
    assert os.stat("/srv/app/notes.txt").st_uid == 1500  # COPY --chown


def test_ready_file():
    st = os.stat("/srv/app/ready.txt")
    assert (st.st_uid, st.st_gid) == (1500, 1500)
    assert stat.S_IMODE(st.st_mode) == 0o644
    with open("/srv/app/ready.txt") as f:
        assert f.read() == "1500 /home/appsvc\n"
