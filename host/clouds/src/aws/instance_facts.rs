//! The facts an EC2 instance's node agent registers its CiliumNode with,
//! read from IMDSv2 over one session token and checked before use.
//!
//! The paths, under `/latest/meta-data/` (AWS's "Instance metadata
//! categories" reference):
//! - `instance-id`: the instance's id, `i-` and 8 or 17 hex digits;
//! - `instance-type`: e.g. `m5.large`;
//! - `placement/availability-zone`: e.g. `eu-west-1a`;
//! - `mac`: the MAC of the primary interface (device number 0);
//! - `network/interfaces/macs/<mac>/vpc-id`, `.../subnet-id`,
//!   `.../interface-id`, `.../device-number`: that interface's VPC, subnet,
//!   ENI id and device number.
//!
//! Reading ([`read`]) is the I/O; [`AwsInstanceFacts::from_answers`] is the
//! pure check of what came back.

use crate::mac::MacAddress;

use super::imds::{Imds, ImdsError};

/// What IMDSv2 told about the instance, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsInstanceFacts {
    /// `i-0123456789abcdef0`
    pub instance_id: String,
    pub instance_type: String,
    pub availability_zone: String,
    /// The primary interface's MAC.
    pub primary_mac: MacAddress,
    /// The primary interface's VPC, `vpc-…`.
    pub vpc_id: String,
    /// The primary interface's subnet, `subnet-…`: the node's subnet.
    pub subnet_id: String,
    /// The primary interface's ENI id, `eni-…`.
    pub interface_id: String,
    /// The primary interface's device number (0 on EC2, but read, not assumed).
    pub device_number: u32,
}

/// The texts IMDSv2 answered, before any check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsImdsAnswers {
    pub instance_id: String,
    pub instance_type: String,
    pub availability_zone: String,
    pub mac: String,
    pub vpc_id: String,
    pub subnet_id: String,
    pub interface_id: String,
    pub device_number: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AwsInstanceFactsError {
    #[error(transparent)]
    Imds(#[from] ImdsError),
    /// `field` is the metadata path's last part (`instance-id`, `vpc-id`, …).
    #[error("IMDSv2 {field}: {value:?} is not {expected}")]
    Invalid {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
}

/// Read the instance's facts over one IMDSv2 session.
pub async fn read(imds: &Imds) -> Result<AwsInstanceFacts, AwsInstanceFactsError> {
    let session = imds.session().await?;
    let mut answers = AwsImdsAnswers {
        instance_id: session.get("instance-id").await?,
        instance_type: session.get("instance-type").await?,
        availability_zone: session.get("placement/availability-zone").await?,
        mac: session.get("mac").await?,
        ..AwsImdsAnswers::default()
    };
    // The MAC goes into the next paths: checked first, so an odd answer
    // cannot reshape them.
    let mac = mac_field(&answers.mac)?;
    let interface = format!("network/interfaces/macs/{mac}");
    answers.vpc_id = session.get(&format!("{interface}/vpc-id")).await?;
    answers.subnet_id = session.get(&format!("{interface}/subnet-id")).await?;
    answers.interface_id = session.get(&format!("{interface}/interface-id")).await?;
    answers.device_number = session.get(&format!("{interface}/device-number")).await?;
    AwsInstanceFacts::from_answers(&answers)
}

impl AwsInstanceFacts {
    /// Check IMDS's answers (surrounding whitespace is ignored).
    pub fn from_answers(answers: &AwsImdsAnswers) -> Result<Self, AwsInstanceFactsError> {
        Ok(Self {
            instance_id: aws_id(
                "instance-id",
                "i-",
                "an instance id (i- and 8 or 17 hex digits)",
                &answers.instance_id,
            )?,
            instance_type: non_empty("instance-type", &answers.instance_type)?,
            availability_zone: non_empty("availability-zone", &answers.availability_zone)?,
            primary_mac: mac_field(&answers.mac)?,
            vpc_id: aws_id(
                "vpc-id",
                "vpc-",
                "a VPC id (vpc- and 8 or 17 hex digits)",
                &answers.vpc_id,
            )?,
            subnet_id: aws_id(
                "subnet-id",
                "subnet-",
                "a subnet id (subnet- and 8 or 17 hex digits)",
                &answers.subnet_id,
            )?,
            interface_id: aws_id(
                "interface-id",
                "eni-",
                "an ENI id (eni- and 8 or 17 hex digits)",
                &answers.interface_id,
            )?,
            device_number: answers.device_number.trim().parse().map_err(|_| {
                AwsInstanceFactsError::Invalid {
                    field: "device-number",
                    value: answers.device_number.clone(),
                    expected: "a device number",
                }
            })?,
        })
    }
}

fn mac_field(text: &str) -> Result<MacAddress, AwsInstanceFactsError> {
    // EC2 writes the colon form; the separator-less form is Azure's.
    let text = text.trim();
    match MacAddress::parse(text) {
        Ok(mac) if text.contains(':') => Ok(mac),
        _ => Err(AwsInstanceFactsError::Invalid {
            field: "mac",
            value: text.to_string(),
            expected: "a colon-separated MAC address",
        }),
    }
}

fn non_empty(field: &'static str, text: &str) -> Result<String, AwsInstanceFactsError> {
    let text = text.trim();
    if text.is_empty() || text.chars().any(char::is_whitespace) {
        return Err(AwsInstanceFactsError::Invalid {
            field,
            value: text.to_string(),
            expected: "one non-empty word",
        });
    }
    Ok(text.to_string())
}

/// An EC2 resource id: `prefix` then 8 (older resources) or 17 lower-case
/// hex digits.
fn aws_id(
    field: &'static str,
    prefix: &str,
    expected: &'static str,
    text: &str,
) -> Result<String, AwsInstanceFactsError> {
    let text = text.trim();
    let valid = text.strip_prefix(prefix).is_some_and(|hex| {
        matches!(hex.len(), 8 | 17)
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if !valid {
        return Err(AwsInstanceFactsError::Invalid {
            field,
            value: text.to_string(),
            expected,
        });
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> AwsImdsAnswers {
        AwsImdsAnswers {
            instance_id: "i-0123456789abcdef0".into(),
            instance_type: "m5.large".into(),
            availability_zone: "eu-west-1a".into(),
            mac: "0a:1b:2c:3d:4e:5f".into(),
            vpc_id: "vpc-0a1b2c3d4e5f60718".into(),
            subnet_id: "subnet-12345678".into(),
            interface_id: "eni-0f1e2d3c4b5a69788".into(),
            device_number: "0".into(),
        }
    }

    #[test]
    fn good_answers_become_facts() {
        let facts = AwsInstanceFacts::from_answers(&good()).unwrap();
        assert_eq!(
            facts,
            AwsInstanceFacts {
                instance_id: "i-0123456789abcdef0".into(),
                instance_type: "m5.large".into(),
                availability_zone: "eu-west-1a".into(),
                primary_mac: MacAddress::new([0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f]),
                vpc_id: "vpc-0a1b2c3d4e5f60718".into(),
                subnet_id: "subnet-12345678".into(),
                interface_id: "eni-0f1e2d3c4b5a69788".into(),
                device_number: 0,
            }
        );
    }

    #[test]
    fn surrounding_whitespace_is_ignored() {
        let mut answers = good();
        answers.instance_id = "i-0123456789abcdef0\n".into();
        answers.device_number = " 0\n".into();
        let facts = AwsInstanceFacts::from_answers(&answers).unwrap();
        assert_eq!(facts.instance_id, "i-0123456789abcdef0");
        assert_eq!(facts.device_number, 0);
    }

    #[test]
    fn each_bad_answer_names_its_field() {
        type Spoil = fn(&mut AwsImdsAnswers);
        let cases: &[(&str, Spoil)] = &[
            ("instance-id", |a| {
                a.instance_id = "0123456789abcdef0".into()
            }),
            ("instance-id", |a| {
                a.instance_id = "i-0123456789ABCDEF0".into()
            }),
            ("instance-id", |a| {
                a.instance_id = "i-0123456789abcdef".into()
            }),
            ("instance-id", |a| a.instance_id = "i-xyz45678".into()),
            ("instance-type", |a| a.instance_type = "".into()),
            ("instance-type", |a| a.instance_type = "m5 large".into()),
            ("availability-zone", |a| a.availability_zone = " \n".into()),
            ("mac", |a| a.mac = "0a1b2c3d4e5f".into()),
            ("mac", |a| a.mac = "0a:1b:2c:3d:4e".into()),
            ("mac", |a| a.mac = "<html>".into()),
            ("vpc-id", |a| a.vpc_id = "subnet-12345678".into()),
            ("vpc-id", |a| a.vpc_id = "vpc-".into()),
            ("subnet-id", |a| a.subnet_id = "vpc-12345678".into()),
            ("subnet-id", |a| a.subnet_id = "subnet-1234567".into()),
            ("interface-id", |a| a.interface_id = "i-12345678".into()),
            ("device-number", |a| a.device_number = "".into()),
            ("device-number", |a| a.device_number = "-1".into()),
            ("device-number", |a| a.device_number = "eth0".into()),
        ];
        for (field, spoil) in cases {
            let mut answers = good();
            spoil(&mut answers);
            match AwsInstanceFacts::from_answers(&answers) {
                Err(AwsInstanceFactsError::Invalid { field: named, .. }) => {
                    assert_eq!(named, *field, "{answers:?}")
                }
                other => panic!("{field}: {answers:?} gave {other:?}"),
            }
        }
    }
}
