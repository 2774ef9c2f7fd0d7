"""moto_server with EC2's rule that an address of a subnet is held by one
interface at a time.

Usage: moto_server.py HOST PORT.

moto 5 picks an interface's addresses at random from its subnet's CIDR and
checks only the addresses that interface already holds, so two interfaces
(or a network or broadcast address) can get the same address, which EC2
never hands out. Here every address moto picks for an interface is a usable
host of the subnet (EC2 reserves the first four and the last) that no
interface in any region holds, chosen under one lock so that concurrent
requests cannot pick the same one.
"""
import ipaddress
import random
import sys
import threading

from moto.ec2.models import ec2_backends
from moto.ec2.models import elastic_network_interfaces
from moto.ec2.models.elastic_network_interfaces import NetworkInterfaceBackend
from moto.server import main

moto_pick = elastic_network_interfaces.random_private_ip
lock = threading.RLock()


def held():
    addresses = set()
    for account in list(ec2_backends.values()):
        for backend in list(account.values()):
            for eni in list(backend.enis.values()):
                addresses.add(eni.private_ip_address)
                addresses.update(a["PrivateIpAddress"] for a in eni.private_ip_addresses)
    return addresses


def free_address(cidr=None, ipv6=False):
    if ipv6 or cidr is None:
        return moto_pick(cidr, ipv6) if cidr else moto_pick()
    network = ipaddress.ip_network(cidr)
    taken = held()
    usable = list(network.hosts())[3:]
    free = [str(host) for host in usable if str(host) not in taken]
    if not free:
        raise RuntimeError(f"no free address in {cidr}")
    return random.choice(free)


def locked(method):
    def under_lock(*args, **kwargs):
        with lock:
            return method(*args, **kwargs)

    return under_lock


elastic_network_interfaces.random_private_ip = free_address
for name in ("create_network_interface", "assign_private_ip_addresses"):
    setattr(NetworkInterfaceBackend, name, locked(getattr(NetworkInterfaceBackend, name)))

if __name__ == "__main__":
    main(["-H", sys.argv[1], "-p", sys.argv[2]])
