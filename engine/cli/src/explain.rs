//! `gantry explain CODE`: the long form of a diagnostic code, from the one registry.

use super::{fail, Io, EXIT_OK};
use lang::codes;
use std::io::Write;

pub fn run(code: Option<&str>, io: &mut Io<'_>) -> u8 {
    let Some(code) = code else {
        let _ = writeln!(
            io.stdout,
            "Diagnostic codes (run `gantry explain CODE` for details):\n"
        );
        for c in codes::CODES {
            let _ = writeln!(
                io.stdout,
                "  {}  {:<7}  {}",
                c.code,
                c.severity().as_str(),
                c.title
            );
        }
        return EXIT_OK;
    };
    match codes::lookup(code) {
        Some(info) => {
            let _ = write!(io.stdout, "{}", info.long_form());
            EXIT_OK
        }
        None => {
            let hint = lang::suggest::closest(
                &code.to_ascii_uppercase(),
                codes::CODES.iter().map(|c| c.code),
            )
            .map(|s| format!("; did you mean `{s}`?"))
            .unwrap_or_default();
            fail(
                io,
                format!("unknown diagnostic code `{code}`{hint} (`gantry explain` lists them)"),
            )
        }
    }
}
