//! A MAC address as the metadata services give it, in one form: six bytes,
//! shown as lower-case, colon-separated hex (`0a:1b:2c:3d:4e:5f`), the form
//! CiliumNode's `eni`/`azure` status and the kernel's link addresses use.
//! EC2 writes that form already; Azure IMDS writes twelve hex digits with no
//! separators (`000D3A1B2C3D`); both are read here.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddress([u8; 6]);

/// Text that is not a MAC address in either accepted form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a MAC address (six hex bytes, colon-separated or not separated)")]
pub struct MacAddressError(pub String);

impl MacAddress {
    pub fn new(bytes: [u8; 6]) -> Self {
        Self(bytes)
    }

    pub fn bytes(self) -> [u8; 6] {
        self.0
    }

    /// `0a:1b:2c:3d:4e:5f` (either case) or `0A1B2C3D4E5F`.
    pub fn parse(text: &str) -> Result<Self, MacAddressError> {
        let fail = || MacAddressError(text.to_string());
        let pairs: Vec<&str> = if text.contains(':') {
            text.split(':').collect()
        } else if text.len() == 12 && text.is_ascii() {
            (0..6).map(|i| &text[2 * i..2 * i + 2]).collect()
        } else {
            return Err(fail());
        };
        if pairs.len() != 6 {
            return Err(fail());
        }
        let mut bytes = [0u8; 6];
        for (byte, pair) in bytes.iter_mut().zip(pairs) {
            // from_str_radix alone would accept a leading '+'.
            if pair.len() != 2 || !pair.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(fail());
            }
            *byte = u8::from_str_radix(pair, 16).map_err(|_| fail())?;
        }
        Ok(Self(bytes))
    }
}

impl fmt::Display for MacAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl std::str::FromStr for MacAddress {
    type Err = MacAddressError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_clouds_forms_read_to_one_form() {
        for (text, shown) in [
            ("0a:1b:2c:3d:4e:5f", "0a:1b:2c:3d:4e:5f"),
            ("0A:1B:2C:3D:4E:5F", "0a:1b:2c:3d:4e:5f"),
            ("000D3A1B2C3D", "00:0d:3a:1b:2c:3d"),
            ("000d3a1b2c3d", "00:0d:3a:1b:2c:3d"),
        ] {
            assert_eq!(
                MacAddress::parse(text).map(|m| m.to_string()),
                Ok(shown.to_string()),
                "{text}"
            );
        }
    }

    #[test]
    fn anything_else_is_refused() {
        for text in [
            "",
            "0a:1b:2c:3d:4e",
            "0a:1b:2c:3d:4e:5f:60",
            "0a:1b:2c:3d:4e:5g",
            "0a:1b:2c:3d:4e:+f",
            "a:1b:2c:3d:4e:5f0",
            "000D3A1B2C3",
            "000D3A1B2C3DE",
            "00-0D-3A-1B-2C-3D",
            "000D3A1B2Cé",
            " 000D3A1B2C3D",
        ] {
            assert_eq!(
                MacAddress::parse(text),
                Err(MacAddressError(text.to_string())),
                "{text:?}"
            );
        }
    }
}
