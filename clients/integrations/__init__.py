"""Adapters that put voxpool inside voice frameworks and telephony platforms (Pipecat, LiveKit Agents, Jambonz)."""
