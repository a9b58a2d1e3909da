//! Any text the formatter accepts: formatting twice gives the same text, every comment
//! is kept, and a policy that checks clean means the same after formatting.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(once) = lang::format::format_source(text) else {
        return;
    };
    let twice = lang::format::format_source(&once);
    assert_eq!(twice.as_ref(), Ok(&once), "fmt is not idempotent");
    let before = lang::check(&[("p.gantry".to_string(), text.to_string())]);
    if before.diagnostics.iter().all(|d| !d.is_error()) {
        let after = lang::check(&[("p.gantry".to_string(), once.clone())]);
        assert_eq!(before.program, after.program, "fmt changed the meaning");
    }
});
