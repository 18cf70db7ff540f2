"""AWS EC2: offers, instances, key pair/security group/AMI."""
