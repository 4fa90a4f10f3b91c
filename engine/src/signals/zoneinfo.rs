//! `/proc/zoneinfo`: free pages and the watermarks of each zone of each
//! NUMA node, what the kernel's reclaim and the OOM killer go by.

use super::error::{SignalError, malformed, parse_u64};
use std::path::Path;

/// One zone of one NUMA node, in pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Zone {
    /// The NUMA node.
    pub(super) node: u32,
    /// The zone's name as the kernel writes it (`DMA`, `DMA32`, `Normal`, `Movable`).
    pub(super) name: String,
    /// Free pages.
    pub(super) free: u64,
    /// The `min` watermark.
    pub(super) min: u64,
    /// The `low` watermark (kswapd wakes under it).
    pub(super) low: u64,
    /// The `high` watermark (kswapd sleeps over it).
    pub(super) high: u64,
    /// Pages the buddy allocator manages.
    pub(super) managed: u64,
    /// Inactive file pages on the zone's LRU (`nr_zone_inactive_file`):
    /// page cache reclaim can drop first.
    pub(super) inactive_file: u64,
}

/// Parses `text`, read from `path` (normally `/proc/zoneinfo`).
///
/// # Errors
/// A zone lacks its free pages, or a value is not a number.
pub(super) fn parse(path: &Path, text: &str) -> Result<Vec<Zone>, SignalError> {
    let mut zones: Vec<Zone> = Vec::new();
    let mut has_free = true;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Node ") {
            if !has_free {
                return Err(malformed(path, "a zone without its free pages"));
            }
            let (node, zone) = rest
                .split_once(", zone")
                .ok_or_else(|| malformed(path, format!("{line:?} names no zone")))?;
            let node = node
                .trim()
                .parse()
                .map_err(|_| malformed(path, format!("{line:?}: the node is not a number")))?;
            zones.push(Zone {
                node,
                name: zone.trim().to_owned(),
                free: 0,
                min: 0,
                low: 0,
                high: 0,
                managed: 0,
                inactive_file: 0,
            });
            has_free = false;
            continue;
        }
        let Some(zone) = zones.last_mut() else {
            continue;
        };
        // `pages free N`, and the watermarks as `min N` (a per-cpu
        // pageset's `high:` has a colon and is not one of them).
        let words: Vec<&str> = line.split_whitespace().collect();
        let (field, value) = match words.as_slice() {
            ["pages", "free", value] => ("free", *value),
            [
                field @ ("min" | "low" | "high" | "managed" | "nr_zone_inactive_file"),
                value,
            ] => (*field, *value),
            _ => continue,
        };
        let value: u64 = value
            .parse()
            .map_err(|_| malformed(path, format!("{field} {value:?} is not a number")))?;
        match field {
            "free" => {
                zone.free = value;
                has_free = true;
            }
            "min" => zone.min = value,
            "low" => zone.low = value,
            "high" => zone.high = value,
            "managed" => zone.managed = value,
            _ => zone.inactive_file = value,
        }
    }
    if !has_free {
        return Err(malformed(path, "a zone without its free pages"));
    }
    if zones.is_empty() {
        return Err(malformed(path, "no zone"));
    }
    Ok(zones)
}

/// `/proc/sys/vm/watermark_scale_factor`: how far apart the kernel sets
/// the watermarks, in ten-thousandths of memory.
///
/// # Errors
/// It is not a number.
pub(super) fn watermark_scale_factor(path: &Path, text: &str) -> Result<u64, SignalError> {
    parse_u64(path, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_this_machines_zones_and_their_watermarks() {
        let zones = parse(Path::new("zoneinfo"), include_str!("fixtures/zoneinfo")).unwrap();
        let names: Vec<(u32, &str)> = zones.iter().map(|z| (z.node, z.name.as_str())).collect();
        assert_eq!(
            names,
            [
                (0, "DMA"),
                (0, "DMA32"),
                (0, "Normal"),
                (0, "Movable"),
                (0, "Device")
            ]
        );
        let normal = &zones[2];
        assert_eq!(
            (
                normal.free,
                normal.min,
                normal.low,
                normal.high,
                normal.managed
            ),
            (944_624, 13_464, 16_830, 20_196, 3_047_424)
        );
    }

    #[test]
    fn a_zone_without_free_pages_or_a_bad_number_is_an_error_naming_the_file() {
        let path = Path::new("/proc/zoneinfo");
        let error = parse(path, "Node 0, zone Normal\n        min 5\n").unwrap_err();
        assert_eq!(
            error.to_string(),
            "/proc/zoneinfo: a zone without its free pages"
        );
        let error = parse(path, "Node 0, zone Normal\n  pages free x\n").unwrap_err();
        assert!(error.to_string().contains("free \"x\""), "{error}");
        assert!(parse(path, "").is_err());
        let error = parse(path, "Node x, zone Normal\n  pages free 1\n").unwrap_err();
        assert!(
            error.to_string().contains("the node is not a number"),
            "{error}"
        );
    }
}
