//! The Python client installed as its README says, for the tests that drive the agent from
//! Python.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::Run;
use std::sync::OnceLock;

/// A virtual environment into which `clients/python` was installed as its README says:
/// `python3 -m venv DIR`, then `DIR/bin/pip install` of that directory. Made on the first call
/// and shared by the process's tests.
pub fn python_client_venv() -> &'static Path {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    VENV.get_or_init(install_python_client)
}

/// A command running the Python of [`python_client_venv`].
pub fn client_python() -> Command {
    let mut command = Command::new(python_client_venv().join("bin/python"));
    // Searched before the environment's own packages: a client found there would be the one
    // tested instead of the installed package.
    command.env_remove("PYTHONPATH").env_remove("PYTHONHOME");
    command
}

fn install_python_client() -> PathBuf {
    // A static is never dropped, so the environment outlives its process: each one is named
    // after its process, and removed by a later one once that process is gone.
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-client");
    for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let owner = entry.file_name().to_string_lossy().into_owned();
        let gone = Command::new("kill")
            .args(["-0", &owner])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| !status.success());
        if gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let dir = root.join(std::process::id().to_string());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("directory for the Python environment");
    let venv = dir.join("venv");
    let client = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../clients/python")
        .canonicalize()
        .expect("clients/python");
    // setuptools builds in the source directory unless told otherwise: build/ and an
    // .egg-info would be left in the repository, and shared by processes installing at once.
    let setuptools_config = dir.join("setuptools.cfg");
    std::fs::write(
        &setuptools_config,
        format!(
            "[build]\nbuild_base = {}\n[egg_info]\negg_base = {}\n",
            dir.join("build").display(),
            dir.display()
        ),
    )
    .expect("setuptools configuration");

    let venv_output = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "python3 could not be run ({error}): the Python tests need Python 3.9 or later \
                 with its venv module (Debian: apt-get install python3 python3-venv)"
            )
        });
    assert!(
        venv_output.status.success(),
        "`python3 -m venv {}` failed: install Python's venv module (Debian: apt-get install \
         python3-venv)\n{}",
        venv.display(),
        Run::from(venv_output).stderr
    );
    let pip = Command::new(venv.join("bin/pip"))
        .arg("install")
        .arg(&client)
        .env("DIST_EXTRA_CONFIG", &setuptools_config)
        .stdin(Stdio::null())
        .output()
        .map(Run::from)
        .unwrap_or_else(|error| Run {
            code: -1,
            stdout: String::new(),
            stderr: error.to_string(),
        });
    assert_eq!(
        pip.code,
        0,
        "`{}/bin/pip install {}` failed: it needs pip in the environment (Debian: apt-get \
         install python3-venv) and the build backend, setuptools, from PyPI or pip's cache\n\
         {}{}",
        venv.display(),
        client.display(),
        pip.stdout,
        pip.stderr
    );
    venv
}
