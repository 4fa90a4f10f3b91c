//! Kubernetes quantities (`512`, `100Mi`, `1.5G`, `250m`) on the host side:
//! one parser (kube_quantity, over k8s-openapi's `Quantity`) for the pod
//! specs the agent reads and the scenarios `vigil simulate` reads.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_quantity::ParsedQuantity;

/// The value of `text` in base units (bytes, cores); none if it is not a
/// quantity, negative or not finite.
pub fn parse(text: &str) -> Option<f64> {
    let value = ParsedQuantity::try_from(text).ok()?.to_bytes_f64()?;
    (value.is_finite() && value >= 0.0).then_some(value)
}

/// The value of `quantity` in base units, as [`parse`].
pub fn value(quantity: &Quantity) -> Option<f64> {
    parse(&quantity.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_read_in_base_units() {
        assert_eq!(parse("512"), Some(512.0));
        assert_eq!(parse("100Mi"), Some((100u64 << 20) as f64));
        assert_eq!(parse("1.5G"), Some(1.5e9));
        assert_eq!(parse("250m"), Some(0.25));
        assert_eq!(parse("-1Gi"), None);
        assert_eq!(parse("lots"), None);
        assert_eq!(parse(""), None);
    }
}
