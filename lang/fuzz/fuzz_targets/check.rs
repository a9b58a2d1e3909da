//! Any bytes as one policy file: parsing, checking and rendering every diagnostic must
//! not panic, overflow the stack or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let checked = lang::check_for_editor(&[("fuzz.gantry".to_string(), text.to_string())]);
    for d in &checked.diagnostics {
        let _ = d.render(&checked.sources, false);
    }
});
