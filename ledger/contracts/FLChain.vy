# pragma version ~=0.4.3
"""
@title FLChain channel ledger
@notice One instance per FLChain channel (Majeed & Hong 2019): an experiment
        and its global model. The channel's aggregator (the deployer) admits
        clients, clients commit their local-update hashes round by round, and
        the aggregator seals each round with the global-model hash, the Merkle
        root of the accepted updates and the hash of the verdicts and metrics.
@dev    Registration is aggregator-only: the channel owner admits devices
        (permissioned channel, as in FLChain), no self-registration.
"""

event Registered:
    client: indexed(address)
    key_hash: bytes32

event Submitted:
    round: indexed(uint256)
    client: indexed(address)
    update_hash: bytes32
    samples: uint256
    base_hash: bytes32

event Finalized:
    round: indexed(uint256)
    global_hash: bytes32
    merkle_root: bytes32
    verdict_hash: bytes32
    attestation_hash: bytes32

struct RoundRecord:
    global_hash: bytes32
    merkle_root: bytes32
    verdict_hash: bytes32
    attestation_hash: bytes32
    submissions: uint256

aggregator: public(address)
channel_id: public(bytes32)
current_round: public(uint256)
registered: public(HashMap[address, bytes32])
submitted: public(HashMap[uint256, HashMap[address, bool]])
rounds: public(HashMap[uint256, RoundRecord])
num_clients: public(uint256)


@deploy
def __init__(channel_id: bytes32):
    self.aggregator = msg.sender
    self.channel_id = channel_id
    self.current_round = 0


@external
def register(client: address, key_hash: bytes32):
    """
    @notice Admit a client device to the channel (aggregator only).
    """
    assert msg.sender == self.aggregator, "not aggregator"
    assert client != empty(address), "zero address"
    assert key_hash != empty(bytes32), "empty key"
    assert self.registered[client] == empty(bytes32), "already registered"
    self.registered[client] = key_hash
    self.num_clients += 1
    log Registered(client=client, key_hash=key_hash)


@external
def submit(round: uint256, update_hash: bytes32, samples: uint256, base_hash: bytes32):
    """
    @notice Commit a local update for the current round from the client's own account.
    """
    assert self.registered[msg.sender] != empty(bytes32), "not registered"
    assert round == self.current_round, "wrong round"
    assert not self.submitted[round][msg.sender], "already submitted"
    assert samples > 0, "no samples"
    self.submitted[round][msg.sender] = True
    self.rounds[round].submissions += 1
    log Submitted(
        round=round, client=msg.sender, update_hash=update_hash,
        samples=samples, base_hash=base_hash
    )


@external
def finalize(
    round: uint256,
    global_hash: bytes32,
    merkle_root: bytes32,
    verdict_hash: bytes32,
    attestation_hash: bytes32,
):
    """
    @notice Seal a round in order (aggregator only) and open the next one.
    @param attestation_hash Hash of the edge committee's aggregate BLS signature
           over (channel, round, global_hash, merkle_root); zero without a committee.
    """
    assert msg.sender == self.aggregator, "not aggregator"
    assert round == self.current_round, "out of order"
    self.rounds[round].global_hash = global_hash
    self.rounds[round].merkle_root = merkle_root
    self.rounds[round].verdict_hash = verdict_hash
    self.rounds[round].attestation_hash = attestation_hash
    self.current_round = round + 1
    log Finalized(
        round=round, global_hash=global_hash, merkle_root=merkle_root,
        verdict_hash=verdict_hash, attestation_hash=attestation_hash
    )
