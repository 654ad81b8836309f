//! The guide's command reference (`docs/cli-reference.md`) is the binary's own help, command
//! by command: it fails when the committed page differs from what the binary prints, so the
//! page cannot drift from the flags. `LEASEHOLD_BLESS=1` rewrites the page instead.

use std::path::Path;
use std::process::Command;

const PAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cli-reference.md");

/// `leasehold ARGS --help`, with no environment variable that the help would show.
fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .arg("--help")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .expect("runs the binary");
    assert!(output.status.success(), "{args:?} --help: {output:?}");
    String::from_utf8(output.stdout).expect("help is UTF-8")
}

/// The commands the top-level help lists, `help` aside.
fn commands(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

fn page() -> String {
    let top = help(&[]);
    let mut page = String::from(
        "# Command reference\n\n\
         Every command of `leasehold` and every flag, as the binary's own `--help` prints them\n\
         (this page is generated from it, and the test suite fails when the two differ).\n\
         Environment variables named `[env: …]` set the flag they belong to.\n",
    );
    let mut section = |title: &str, text: &str| {
        page.push_str(&format!(
            "\n## {title}\n\n```text\n{}\n```\n",
            text.trim_end()
        ));
    };
    section("leasehold", &top);
    let names = commands(&top);
    assert!(
        names.len() >= 15,
        "the command list was not found in: {top}"
    );
    for name in &names {
        section(&format!("leasehold {name}"), &help(&[name]));
    }
    page
}

#[test]
fn the_command_reference_is_the_binarys_help() {
    let generated = page();
    if std::env::var_os("LEASEHOLD_BLESS").is_some() {
        std::fs::write(PAGE, &generated).expect("writes the page");
        return;
    }
    let committed = std::fs::read_to_string(Path::new(PAGE)).unwrap_or_default();
    if committed != generated {
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(generated.lines().count()));
        panic!(
            "docs/cli-reference.md differs from the binary's help from line {} on: \
             rewrite it with `LEASEHOLD_BLESS=1 cargo test -p leasehold-cli --test cli_reference`\n\
             committed: {:?}\ngenerated: {:?}",
            first + 1,
            committed.lines().nth(first),
            generated.lines().nth(first)
        );
    }
}
