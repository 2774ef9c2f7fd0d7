//! A MAC address parsed from the `aa:bb:cc:dd:ee:ff` form clouds report.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mac(pub [u8; 6]);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MAC address {text:?} is not six colon-separated two-digit hex bytes")]
pub struct MacError {
    pub text: String,
}

impl FromStr for Mac {
    type Err = MacError;

    fn from_str(text: &str) -> Result<Self, MacError> {
        let bad = || MacError {
            text: text.to_owned(),
        };
        let mut bytes = [0u8; 6];
        let mut parts = text.split(':');
        for byte in &mut bytes {
            let part = parts.next().ok_or_else(bad)?;
            // from_str_radix alone would take "+f" or "f".
            if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad());
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Mac(bytes))
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_colon_separated_hex_and_refuses_anything_else() {
        let cases: [(&str, Option<[u8; 6]>); 9] = [
            (
                "02:1a:2b:3c:4d:5e",
                Some([0x02, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e]),
            ),
            ("0A:FF:00:00:00:01", Some([0x0a, 0xff, 0, 0, 0, 1])),
            ("02:1a:2b:3c:4d", None),
            ("02:1a:2b:3c:4d:5e:6f", None),
            ("02-1a-2b-3c-4d-5e", None),
            ("2:1a:2b:3c:4d:5e", None),
            ("+2:1a:2b:3c:4d:5e", None),
            ("zz:1a:2b:3c:4d:5e", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(text.parse::<Mac>().ok().map(|m| m.0), want, "{text:?}");
        }
    }

    #[test]
    fn prints_lowercase_and_reads_back() {
        let mac: Mac = "0A:FF:00:00:00:01".parse().unwrap();
        assert_eq!(mac.to_string(), "0a:ff:00:00:00:01");
        assert_eq!(mac.to_string().parse::<Mac>(), Ok(mac));
    }
}
