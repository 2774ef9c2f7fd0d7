"""Seed a moto_server with a small AWS cluster for the AWS provider's tests.

Usage: moto_seed.py ENDPOINT [INSTANCES] (3 cluster instances unless told). Prints the ids it made as one JSON object.
Uses boto3 (installed with moto[server]) so that the seeding goes through an
EC2 client nobody in this project wrote.
"""
import json
import sys

import boto3

CLUSTER_TAG = "kubernetes.io/cluster/test"


def main(endpoint, instances):
    ec2 = boto3.client(
        "ec2",
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id="AKIDSEED",
        aws_secret_access_key="seed-secret",
    )
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    ec2.associate_vpc_cidr_block(VpcId=vpc, CidrBlock="10.1.0.0/16")
    nodes = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24", AvailabilityZone="us-east-1a")
    pods = []
    for cidr, zone in [("10.0.1.0/24", "us-east-1a"), ("10.0.2.0/24", "us-east-1b")]:
        subnet = ec2.create_subnet(
            VpcId=vpc,
            CidrBlock=cidr,
            AvailabilityZone=zone,
            TagSpecifications=[
                {"ResourceType": "subnet", "Tags": [{"Key": "ipam", "Value": "pods"}]}
            ],
        )
        pods.append(subnet["Subnet"]["SubnetId"])
    group = ec2.create_security_group(
        GroupName="pods",
        Description="pods",
        VpcId=vpc,
        TagSpecifications=[
            {"ResourceType": "security-group", "Tags": [{"Key": "ipam", "Value": "pods"}]}
        ],
    )["GroupId"]
    cluster = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=instances,
        MaxCount=instances,
        InstanceType="m5.large",
        SubnetId=nodes["Subnet"]["SubnetId"],
        SecurityGroupIds=[group],
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": CLUSTER_TAG, "Value": "owned"}]}
        ],
    )
    outsider = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        InstanceType="t3.small",
        SubnetId=nodes["Subnet"]["SubnetId"],
    )
    print(
        json.dumps(
            {
                "vpc": vpc,
                "node_subnet": nodes["Subnet"]["SubnetId"],
                "pod_subnets": pods,
                "security_group": group,
                "instances": sorted(i["InstanceId"] for i in cluster["Instances"]),
                "outsider": outsider["Instances"][0]["InstanceId"],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
