//! Slice type → Placement resource class, the rule vgpud's reporter uses (FORMATS.md,
//! "OpenStack Placement"; `agent::placement::classes` once it is on main: this copy goes then).
//! The fleet configures no `default_type` and no `[placement.resource_classes]`, so the rule is
//! all it needs.

/// The resource class vgpud reports `slice_type` under, without overrides or a default type.
pub fn class_of(slice_type: &str) -> String {
    if slice_type == "gpu" {
        return "PGPU".to_owned();
    }
    let body: String = slice_type
        .to_ascii_uppercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if slice_type.contains('.')
        && slice_type
            .as_bytes()
            .first()
            .is_some_and(u8::is_ascii_digit)
    {
        // A MIG profile (`3g.40gb`).
        return format!("CUSTOM_MIG_{body}");
    }
    format!("CUSTOM_{body}")
}

#[cfg(test)]
mod tests {
    use super::class_of;

    #[test]
    fn classes_follow_the_reporters_rule() {
        assert_eq!(class_of("gpu"), "PGPU");
        assert_eq!(class_of("3g.40gb"), "CUSTOM_MIG_3G_40GB");
        assert_eq!(class_of("nvidia-222"), "CUSTOM_NVIDIA_222");
        assert_eq!(class_of("NVIDIA A100-4C"), "CUSTOM_NVIDIA_A100_4C");
        assert_eq!(class_of("vf"), "CUSTOM_VF");
    }
}
