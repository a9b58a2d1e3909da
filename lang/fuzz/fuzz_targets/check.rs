//! Any bytes as one policy file: parsing, checking and rendering every diagnostic must
//! not panic, overflow the stack or hang; and a plain check, which frees the tree as it
//! lowers it, must report and lower what an editor's check does.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let files = [("fuzz.gantry".to_string(), text.to_string())];
    let checked = lang::check_for_editor(&files);
    for d in &checked.diagnostics {
        let _ = d.render(&checked.sources, false);
    }
    let plain = lang::check(&files);
    assert_eq!(plain.diagnostics, checked.diagnostics, "a plain check reports otherwise");
    assert_eq!(plain.program, checked.program, "a plain check lowers otherwise");
});
