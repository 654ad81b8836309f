//! What packages install beside the binary, generated from the same definitions as its
//! `--help`, so that neither can drift: shell completions and manual pages.

use std::path::Path;

use anyhow::Context;
use clap::CommandFactory;

use crate::cli::Cli;
use crate::Outcome;

/// `completions SHELL`: the script on stdout.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<Outcome> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "leasehold", &mut script);
    crate::write_out(&String::from_utf8_lossy(&script))?;
    Ok(Outcome::Success)
}

/// `man-pages DIR`: `leasehold.1`, and `leasehold-COMMAND.1` for each visible command.
pub fn man_pages(directory: &Path) -> anyhow::Result<Outcome> {
    std::fs::create_dir_all(directory)
        .with_context(|| format!("cannot create {}", directory.display()))?;
    let top = Cli::command().name("leasehold");
    write_page(directory, "leasehold", top.clone())?;
    for command in top.get_subcommands().filter(|c| !c.is_hide_set()) {
        let name = format!("leasehold-{}", command.get_name());
        write_page(directory, &name, command.clone().name(name.clone()))?;
    }
    Ok(Outcome::Success)
}

fn write_page(directory: &Path, name: &str, command: clap::Command) -> anyhow::Result<()> {
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut page)
        .with_context(|| format!("cannot render the page of {name}"))?;
    let path = directory.join(format!("{name}.1"));
    std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))
}
