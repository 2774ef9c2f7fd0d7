"""moto_server with EC2's rule that an address of a subnet is held by one
interface at a time.

Usage: moto_server.py HOST PORT.

moto 5 picks an interface's addresses at random from its subnet's CIDR and
checks only the addresses that interface already holds, so two interfaces
(or a network or broadcast address) can get the same address, which EC2
never hands out. Here every address moto picks for an interface is a usable
host of the subnet (EC2 reserves the first four and the last) that no
interface in any region holds (nor the interface being created: moto picks
its primary and secondaries before it registers it), chosen under one lock
so that concurrent requests cannot pick the same one.

moto also answers AssignPrivateIpAddresses with every address of the
interface, the primary included; EC2 answers with the addresses it just
assigned (AssignedPrivateIpAddressesSet), and so does this server.
"""
import ipaddress
import random
import sys
import threading

from moto.ec2.models import ec2_backends
from moto.ec2.models import elastic_network_interfaces
from moto.ec2.models.elastic_network_interfaces import NetworkInterfaceBackend
from moto.ec2.responses import elastic_network_interfaces as responses
from moto.server import main

moto_pick = elastic_network_interfaces.random_private_ip
lock = threading.RLock()
# Addresses picked during the request being served (under the lock), for an
# interface moto has not registered yet.
picked = set()


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
    taken = held() | picked
    usable = list(network.hosts())[3:]
    free = [str(host) for host in usable if str(host) not in taken]
    if not free:
        raise RuntimeError(f"no free address in {cidr}")
    address = random.choice(free)
    picked.add(address)
    return address


def locked(method):
    def under_lock(*args, **kwargs):
        with lock:
            picked.clear()
            try:
                return method(*args, **kwargs)
            finally:
                picked.clear()

    return under_lock


def assign_private_ip_addresses(self):
    """EC2's answer: the addresses this call assigned, not all of them."""
    eni_id = self._get_param("NetworkInterfaceId")
    with lock:
        eni = self.ec2_backend.get_network_interface(eni_id)
        before = {a["PrivateIpAddress"] for a in eni.private_ip_addresses}
        eni = self.ec2_backend.assign_private_ip_addresses(
            eni_id,
            self._get_param("PrivateIpAddresses", []),
            self._get_int_param("SecondaryPrivateIpAddressCount", 0),
        )
    assigned = [a for a in eni.private_ip_addresses if a["PrivateIpAddress"] not in before]
    return responses.ActionResult(
        {"NetworkInterfaceId": eni.id, "AssignedPrivateIpAddresses": assigned}
    )


elastic_network_interfaces.random_private_ip = free_address
for name in ("create_network_interface", "assign_private_ip_addresses"):
    setattr(NetworkInterfaceBackend, name, locked(getattr(NetworkInterfaceBackend, name)))
responses.ElasticNetworkInterfaces.assign_private_ip_addresses = assign_private_ip_addresses

if __name__ == "__main__":
    main(["-H", sys.argv[1], "-p", sys.argv[2]])
