//! The name this program was started by: `cargo llmreplay` under cargo, `cargo-llmreplay` from
//! the pip or npm package, or whatever file name it was run as. Every command it prints, in its
//! messages and its `--help`, begins with that name, so a command pasted from it works where
//! there is no cargo.

use std::borrow::Cow;
use std::sync::OnceLock;

/// Decided once, in `main`, before anything is printed.
static PROGRAM: OnceLock<daemon::Program> = OnceLock::new();

/// How the messages and the help are written, before they are said in the program's name.
const WRITTEN_AS: &str = "cargo llmreplay";

/// Names the program for the rest of the run; the first call wins.
pub fn set(program: daemon::Program) {
    let _ = PROGRAM.set(program);
}

/// The name every printed command begins with: `cargo llmreplay` until `main` decides.
pub fn program() -> &'static daemon::Program {
    PROGRAM.get_or_init(daemon::Program::default)
}

/// `text` with each command it names said in the program's name.
pub fn speak(text: &str) -> Cow<'_, str> {
    program().speak(text)
}

/// A command line whose usage, help and examples are said in the program's name.
pub fn help(command: clap::Command) -> clap::Command {
    let name = program().as_str();
    if name == WRITTEN_AS {
        return command;
    }
    // The program's own name, alone, is said as it was started.
    let named = |b: &str| match b {
        WRITTEN_AS => name.to_string(),
        _ => speak(b).into_owned(),
    };
    let bin = command.get_bin_name().map(named);
    let command = match bin {
        Some(bin) => command.bin_name(bin),
        None => command,
    };
    let display = command.get_display_name().map(named);
    let command = match display {
        Some(display) => command.display_name(display),
        None => command,
    };
    spoken(command)
}

fn spoken(mut command: clap::Command) -> clap::Command {
    if let Some(text) = say(command.get_about()) {
        command = command.about(text);
    }
    if let Some(text) = say(command.get_long_about()) {
        command = command.long_about(text);
    }
    if let Some(text) = say(command.get_after_help()) {
        command = command.after_help(text);
    }
    if let Some(text) = say(command.get_after_long_help()) {
        command = command.after_long_help(text);
    }
    if let Some(text) = say(command.get_before_help()) {
        command = command.before_help(text);
    }
    command
        .mut_args(|mut arg| {
            if let Some(text) = say(arg.get_help()) {
                arg = arg.help(text);
            }
            if let Some(text) = say(arg.get_long_help()) {
                arg = arg.long_help(text);
            }
            arg
        })
        .mut_subcommands(spoken)
}

/// A help text said in the program's name, when it names a command.
fn say(text: Option<&clap::builder::StyledStr>) -> Option<String> {
    let text = text?.to_string();
    match speak(&text) {
        Cow::Owned(said) => Some(said),
        Cow::Borrowed(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only commands are said in the program's name: a folder or a test named
    /// `cargo llmreplay ...` is data.
    #[test]
    fn only_commands_are_renamed() {
        set(daemon::Program::from_args(
            std::ffi::OsStr::new("cargo-llmreplay"),
            false,
        ));
        assert_eq!(
            speak("run `cargo llmreplay status --fix`; or cargo llmreplay test"),
            "run `cargo-llmreplay status --fix`; or cargo-llmreplay test"
        );
        assert_eq!(
            speak("/tmp/cargo llmreplay demo: test cargo llmreplay rocks"),
            "/tmp/cargo llmreplay demo: test cargo llmreplay rocks"
        );
    }
}
