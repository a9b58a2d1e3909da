//! Tests' switches: each sends the cycle down a plainer, slower path that must give the
//! same plan, so tests can compare the two. Per thread: tests run side by side.

use std::cell::Cell;

#[derive(Debug, Clone, Copy)]
pub(super) enum Switch {
    /// [`super::record_holders_at_once`].
    RecordHoldersAtOnce,
    /// [`super::find_victims_afresh`].
    VictimsAfresh,
    /// [`super::check_victim_indexes`].
    CheckVictimIndexes,
    /// [`super::keep_nothing`].
    KeepNothing,
    /// [`super::memos_off`].
    MemosOff,
}

thread_local! {
    static ON: Cell<u8> = const { Cell::new(0) };
}

fn bit(switch: Switch) -> u8 {
    1 << switch as u8
}

pub(super) fn set(switch: Switch, on: bool) {
    ON.with(|c| {
        let bits = if on {
            c.get() | bit(switch)
        } else {
            c.get() & !bit(switch)
        };
        c.set(bits);
    });
}

pub(super) fn is_on(switch: Switch) -> bool {
    ON.with(|c| c.get() & bit(switch) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_are_apart_and_per_thread() {
        set(Switch::VictimsAfresh, true);
        assert!(is_on(Switch::VictimsAfresh) && !is_on(Switch::RecordHoldersAtOnce));
        set(Switch::RecordHoldersAtOnce, true);
        set(Switch::VictimsAfresh, false);
        assert!(!is_on(Switch::VictimsAfresh) && is_on(Switch::RecordHoldersAtOnce));
        let elsewhere = std::thread::spawn(|| is_on(Switch::RecordHoldersAtOnce)).join();
        assert!(matches!(elsewhere, Ok(false)));
        set(Switch::RecordHoldersAtOnce, false);
        assert!(!is_on(Switch::RecordHoldersAtOnce));
    }
}
