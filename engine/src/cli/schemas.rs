//! `vigil crd`, `config-schema` and `scenario-schema`: the definitions other
//! tools read, printed.

/// The custom resource definitions, as YAML.
pub(super) fn crd() -> anyhow::Result<()> {
    print!("{}", crate::crds::definitions());
    Ok(())
}

/// The JSON Schema of vigil's config.
pub(super) fn config() -> anyhow::Result<()> {
    let schema = crate::config::schema::json_schema();
    println!("{}", serde_json::to_string_pretty(&schema)?);
    Ok(())
}

/// The JSON Schema of a scenario file.
pub(super) fn scenario() -> anyhow::Result<()> {
    let schema = crate::simulate::schema::json_schema();
    println!("{}", serde_json::to_string_pretty(&schema)?);
    Ok(())
}
