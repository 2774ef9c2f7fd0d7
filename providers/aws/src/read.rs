//! The read operations: paginated Describe calls, always with MaxResults and
//! the settings' filters.

use std::collections::BTreeMap;

use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types::Filter;
use aws_smithy_async::future::pagination_stream::PaginationStream;
use ipam_provider_sdk::{
    Error, Instance, Limits, NetworkInterface, SecurityGroup, Subnet, Tag, Vpc,
};

use crate::convert;
use crate::errors::from_sdk;
use crate::settings::cluster_tag_key;
use crate::Ec2;

/// Values per filter in one request (EC2 accepts up to 200).
const FILTER_VALUES: usize = 200;

pub fn filter(name: &str, values: impl IntoIterator<Item = impl Into<String>>) -> Filter {
    Filter::builder()
        .name(name)
        .set_values(Some(values.into_iter().map(Into::into).collect()))
        .build()
}

fn tag_filters(tags: &BTreeMap<String, String>) -> impl Iterator<Item = Filter> + '_ {
    tags.iter()
        .map(|(key, value)| filter(&format!("tag:{key}"), [value.as_str()]))
}

/// Hand every page of a paginated call to `take`, stopping at the first
/// error (as a WIT error naming the operation).
async fn each_page<P, E>(
    operation: &str,
    mut pages: PaginationStream<Result<P, SdkError<E>>>,
    mut take: impl FnMut(P) -> Result<(), Error>,
) -> Result<(), Error>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    while let Some(page) = pages.next().await {
        take(page.map_err(|e| from_sdk(operation, e))?)?;
    }
    Ok(())
}

impl Ec2 {
    fn vpc_filter(&self) -> Option<Filter> {
        self.settings
            .vpc_id
            .as_deref()
            .map(|vpc| filter("vpc-id", [vpc]))
    }

    pub async fn vpcs(&self) -> Result<Vec<Vpc>, Error> {
        let pages = self
            .client
            .describe_vpcs()
            .set_filters(Some(self.vpc_filter().into_iter().collect()))
            .max_results(self.settings.page_size)
            .into_paginator()
            .send();
        let mut vpcs = Vec::new();
        each_page("DescribeVpcs", pages, |page| {
            for vpc in page.vpcs() {
                vpcs.push(convert::vpc(vpc)?);
            }
            Ok(())
        })
        .await?;
        Ok(vpcs)
    }

    pub async fn subnets(&self) -> Result<Vec<Subnet>, Error> {
        let settings = &self.settings;
        let mut filters: Vec<Filter> = self.vpc_filter().into_iter().collect();
        filters.extend(tag_filters(&settings.subnet_tags));
        if !settings.subnet_ids.is_empty() {
            filters.push(filter("subnet-id", settings.subnet_ids.iter().cloned()));
        }
        let pages = self
            .client
            .describe_subnets()
            .set_filters(Some(filters))
            .max_results(settings.page_size)
            .into_paginator()
            .send();
        let mut subnets = Vec::new();
        each_page("DescribeSubnets", pages, |page| {
            for subnet in page.subnets() {
                subnets.push(convert::subnet(subnet)?);
            }
            Ok(())
        })
        .await?;
        Ok(subnets)
    }

    pub async fn security_groups(&self) -> Result<Vec<SecurityGroup>, Error> {
        let mut filters: Vec<Filter> = self.vpc_filter().into_iter().collect();
        filters.extend(tag_filters(&self.settings.security_group_tags));
        let pages = self
            .client
            .describe_security_groups()
            .set_filters(Some(filters))
            .max_results(self.settings.page_size)
            .into_paginator()
            .send();
        let mut groups = Vec::new();
        each_page("DescribeSecurityGroups", pages, |page| {
            for group in page.security_groups() {
                groups.push(convert::security_group(group)?);
            }
            Ok(())
        })
        .await?;
        Ok(groups)
    }

    /// Running and pending instances the settings select (the named ones
    /// among them when `ids` is not empty), with every interface on network
    /// card 0.
    pub async fn instances(&self, ids: &[String]) -> Result<Vec<Instance>, Error> {
        let settings = &self.settings;
        let mut scope: Vec<Filter> = vec![filter("instance-state-name", ["pending", "running"])];
        scope.extend(self.vpc_filter());
        if !settings.instance_tags.is_empty() {
            scope.extend(tag_filters(&settings.instance_tags));
        } else if let Some(cluster) = &settings.cluster_name {
            scope.push(filter("tag-key", [cluster_tag_key(cluster)]));
        }
        let mut instances = Vec::new();
        if ids.is_empty() {
            self.describe_instances(scope, &mut instances).await?;
        } else {
            for chunk in ids.chunks(FILTER_VALUES) {
                let mut filters = scope.clone();
                filters.push(filter("instance-id", chunk.iter().cloned()));
                self.describe_instances(filters, &mut instances).await?;
            }
        }
        self.add_interfaces(&mut instances).await?;
        Ok(instances)
    }

    async fn describe_instances(
        &self,
        filters: Vec<Filter>,
        into: &mut Vec<Instance>,
    ) -> Result<(), Error> {
        let pages = self
            .client
            .describe_instances()
            .set_filters(Some(filters))
            .max_results(self.settings.page_size)
            .into_paginator()
            .send();
        each_page("DescribeInstances", pages, |page| {
            for reservation in page.reservations() {
                for instance in reservation.instances() {
                    into.push(convert::instance(instance)?);
                }
            }
            Ok(())
        })
        .await
    }

    /// Every interface attached to these instances, from
    /// DescribeNetworkInterfaces (DescribeInstances has no interface tags).
    async fn add_interfaces(&self, instances: &mut [Instance]) -> Result<(), Error> {
        let ids: Vec<String> = instances.iter().map(|i| i.id.clone()).collect();
        let mut by_instance: BTreeMap<String, Vec<NetworkInterface>> = BTreeMap::new();
        for chunk in ids.chunks(FILTER_VALUES) {
            let filters = vec![filter("attachment.instance-id", chunk.iter().cloned())];
            for interface in self.describe_interfaces(filters).await? {
                if let Some(instance) = interface.instance_id.clone() {
                    by_instance.entry(instance).or_default().push(interface);
                }
            }
        }
        for instance in instances {
            let mut interfaces = by_instance.remove(&instance.id).unwrap_or_default();
            interfaces.sort_by_key(|i| i.index);
            instance.interfaces = interfaces;
        }
        Ok(())
    }

    /// Interfaces matching these filters, those on network card 0.
    pub async fn describe_interfaces(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<NetworkInterface>, Error> {
        let found = self.describe_with_attachments(filters).await?;
        Ok(found.into_iter().map(|(interface, _)| interface).collect())
    }

    /// Interfaces matching these filters, those on network card 0, each with
    /// the id of its live attachment.
    async fn describe_with_attachments(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<(NetworkInterface, Option<String>)>, Error> {
        let pages = self
            .client
            .describe_network_interfaces()
            .set_filters(Some(filters))
            .max_results(self.settings.page_size)
            .into_paginator()
            .send();
        let mut interfaces = Vec::new();
        each_page("DescribeNetworkInterfaces", pages, |page| {
            for eni in page.network_interfaces() {
                if convert::on_first_card(eni) {
                    let attachment = convert::live_attachment(eni)
                        .and_then(|a| a.attachment_id())
                        .map(str::to_string);
                    interfaces.push((convert::interface(eni)?, attachment));
                }
            }
            Ok(())
        })
        .await?;
        Ok(interfaces)
    }

    /// One interface by id with its live attachment's id; None when EC2
    /// does not have it.
    pub async fn interface(
        &self,
        id: &str,
    ) -> Result<Option<(NetworkInterface, Option<String>)>, Error> {
        let found = self
            .describe_with_attachments(vec![filter("network-interface-id", [id])])
            .await?;
        Ok(found.into_iter().find(|(i, _)| i.id == id))
    }

    /// The id of the interface at this device index of the instance's
    /// network card 0, if one is there (attached, attaching or detaching).
    pub async fn holder_of_device_index(
        &self,
        instance_id: &str,
        index: u32,
    ) -> Result<Option<String>, Error> {
        let pages = self
            .client
            .describe_network_interfaces()
            .set_filters(Some(vec![filter("attachment.instance-id", [instance_id])]))
            .max_results(self.settings.page_size)
            .into_paginator()
            .send();
        let mut holder = None;
        each_page("DescribeNetworkInterfaces", pages, |page| {
            if holder.is_none() {
                holder = page
                    .network_interfaces()
                    .iter()
                    .find(|eni| convert::holds_device_index(eni, index))
                    .map(|eni| {
                        eni.network_interface_id()
                            .unwrap_or("an interface EC2 gave no id")
                            .to_string()
                    });
            }
            Ok(())
        })
        .await?;
        Ok(holder)
    }

    pub async fn detached_interfaces(&self, tags: &[Tag]) -> Result<Vec<NetworkInterface>, Error> {
        let mut filters = vec![filter("status", ["available"])];
        filters.extend(self.vpc_filter());
        filters.extend(
            tags.iter()
                .map(|t| filter(&format!("tag:{}", t.key), [t.value.as_str()])),
        );
        self.describe_interfaces(filters).await
    }

    /// Limits of an instance type from DescribeInstanceTypes: interfaces on
    /// network card 0, addresses per interface, prefix delegation on Nitro.
    pub async fn instance_limits(&self, instance_type: &str) -> Result<Limits, Error> {
        let answer = self
            .client
            .describe_instance_types()
            .instance_types(instance_type.into())
            .send()
            .await
            .map_err(|e| from_sdk("DescribeInstanceTypes", e))?;
        let info = answer
            .instance_types()
            .iter()
            .find(|t| t.instance_type().map(|t| t.as_str()) == Some(instance_type))
            .ok_or_else(|| Error::NotFound(format!("instance type {instance_type}")))?;
        convert::limits(instance_type, info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_carries_its_name_and_every_value() {
        let built = filter("instance-state-name", ["pending", "running"]);
        assert_eq!(built.name(), Some("instance-state-name"));
        assert_eq!(built.values(), ["pending", "running"]);
    }

    #[test]
    fn tag_filters_are_one_tag_filter_per_tag() {
        let tags = BTreeMap::from([
            ("ipam".to_string(), "pods".to_string()),
            ("team".to_string(), "network".to_string()),
        ]);
        let filters: Vec<Filter> = tag_filters(&tags).collect();
        let named: Vec<(&str, &[String])> = filters
            .iter()
            .map(|f| (f.name().unwrap_or_default(), f.values()))
            .collect();
        assert_eq!(
            named,
            [
                ("tag:ipam", &["pods".to_string()][..]),
                ("tag:team", &["network".to_string()][..]),
            ]
        );
    }
}
