//! The Python client in `clients/python` as a package: what pip installs from it into a
//! virtual environment, and where Python imports it from there.

mod common;

use std::path::{Path, PathBuf};

fn canonical(path: impl AsRef<Path>) -> PathBuf {
    let path = path.as_ref();
    path.canonicalize()
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[test]
fn pip_installs_the_client_where_python_imports_it_from_with_its_type_information() {
    let venv = canonical(common::python::python_client_venv());
    // Outside the repository, so that no copy of the source is on the way.
    let elsewhere = tempfile::tempdir().expect("temporary directory");
    let python = |code: &str| {
        let output = common::python::client_python()
            .args(["-c", code])
            .current_dir(elsewhere.path())
            .output()
            .expect("the environment's python runs");
        let run = common::Run::from(output);
        assert_eq!(run.code, 0, "python -c {code:?}: {run:?}");
        run.stdout.trim().to_string()
    };

    let module = canonical(python(
        "import leasehold_agent; print(leasehold_agent.__file__)",
    ));
    let site_packages = canonical(python(
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
    ));
    assert!(
        site_packages.starts_with(&venv),
        "{} is not in the environment {}",
        site_packages.display(),
        venv.display()
    );
    assert_eq!(module, site_packages.join("leasehold_agent/__init__.py"));
    let source = canonical(concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/python"));
    assert!(!module.starts_with(&source), "{}", module.display());

    // The marker that lets type checkers read the package's own hints (PEP 561): in the
    // distribution's record of what it installed, and there.
    let files = python(
        "import importlib.metadata as m; print('\\n'.join(map(str, m.files('leasehold-agent'))))",
    );
    assert!(
        files.lines().any(|file| file == "leasehold_agent/py.typed"),
        "{files}"
    );
    assert!(site_packages.join("leasehold_agent/py.typed").is_file());

    let metadata = python(
        "import importlib.metadata as m; d = m.metadata('leasehold-agent'); \
         print(d['Name'], d['Version'], d['Requires-Python'], m.requires('leasehold-agent'))",
    );
    assert_eq!(metadata, "leasehold-agent 0.1.0 >=3.9 None");
    python(
        "from leasehold_agent import Agent, AgentError, EventStream, Lease, LeaseEvent, \
         NotOwner, Permit, PermitRecord; import leasehold_agent as l; \
         [getattr(l, name) for name in l.__all__]",
    );
}
