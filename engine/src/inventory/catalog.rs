//! GPU models Gantry knows without a policy: the stdlib's `std.gpus`, compiled once. Fleet
//! files use it for memory defaults and MIG tables; a policy's own `gpu` models add to it.

use lang::ir::GpuModel;
use std::sync::LazyLock;

static STDLIB_MODELS: LazyLock<Vec<GpuModel>> = LazyLock::new(|| {
    lang::check(&[("<catalog>".to_string(), "use std.gpus\n".to_string())])
        .program
        .map(|p| p.gpu_models)
        .unwrap_or_default()
});

pub fn stdlib_models() -> &'static [GpuModel] {
    &STDLIB_MODELS
}

/// The stdlib models plus a policy's, the policy's winning on the same `id`.
pub fn merged(policy: &[GpuModel]) -> Vec<GpuModel> {
    let mut all: Vec<GpuModel> = policy.to_vec();
    for m in stdlib_models() {
        if !all.iter().any(|x| x.id == m.id) {
            all.push(m.clone());
        }
    }
    all
}
