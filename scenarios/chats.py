"""Text prompts for the Live engine page: DESIGN.md's shapes in words, scaled down for a CPU model.

The shapes follow examples/workloads.py (a shared system prompt S, a few-shot block F, per-user
questions, a RAG document, a multi-turn chat), in words instead of synthetic token ids, so the
tree's edges read as text. Sizes are ~1/4 to 1/8 of DESIGN.md's (S is ~260 tokens, not 512) so a
2-core CPU prefills a scenario in seconds. Each prompt is a list of chat messages; the chat
template puts S first, so every prompt of a scenario shares S's tokens exactly.
Leaves out: the exact token counts of DESIGN.md (the Tour page has those).
"""

from __future__ import annotations

from typing import NamedTuple

SYSTEM = (
    "You are Tessa, the customer-support assistant of Northwind Outfitters, a shop that sells "
    "tents, sleeping bags, stoves, backpacks and hiking boots online and in twelve stores. "
    "Answer in two or three short sentences, politely and plainly. Rules you always follow: "
    "1. Orders ship within two working days; standard delivery takes three to five days, "
    "express delivery one to two days for a fee of 12 euros. "
    "2. Customers may return unused items within 60 days for a full refund; used items only "
    "when they are faulty. Refunds reach the original payment method within ten days. "
    "3. Every tent and backpack has a five-year warranty against defects in seams, zips and "
    "poles; boots have two years. Damage from misuse, fire or pets is not covered. "
    "4. Never promise a discount; you may mention the members' club, which gives free express "
    "delivery and early access to sales. "
    "5. Ask for the order number (format NW- followed by six digits) before discussing an order. "
    "6. If a customer is upset, apologise once, then solve the problem. "
    "7. Hand over to a human colleague when the customer asks for one, or for legal questions. "
    "8. Do not invent product names, prices or stock levels; say you will check instead."
)
FEW_SHOT = (
    "Examples of good answers. "
    "Customer: My tent pole snapped on the first night. Tessa: I am sorry about your trip. "
    "Poles are covered by our five-year warranty; please send me your order number and a photo, "
    "and we will ship a replacement pole today. "
    "Customer: Can I return boots I wore once indoors? Tessa: Yes, boots worn only indoors "
    "count as unused, so you can return them within 60 days for a full refund. "
    "Customer: Where is my parcel? Tessa: I can check that for you; what is your order number? "
    "It starts with NW- and has six digits."
)
MANUAL = (
    "Product manual excerpt, Ridgeline 2 tent: the Ridgeline 2 is a two-person, three-season "
    "dome tent weighing 2.1 kg packed. It has two doors, two vestibules of 0.8 square metres "
    "each, and an inner tent of breathable polyester with mesh panels. Pitch the outer tent "
    "first in rain: clip the inner in afterwards. The aluminium poles are colour coded; the red "
    "pole crosses the blue one at the roof. Peg the four corners before tensioning the guy "
    "lines. Seams are taped and the flysheet has a 3,000 mm hydrostatic head. To clean, rinse "
    "with lukewarm water and dry fully before storing. Spare parts: poles, pegs and the repair "
    "sleeve are sold separately."
)


class Scenario(NamedTuple):
    name: str  # shown in the picker
    about: str  # one line under it: what the tree should show
    prompts: list[tuple[str, list[dict[str, str]]]]  # (label, chat messages), submitted in order


def _chat(system: str, *turns: str) -> list[dict[str, str]]:
    """Messages: the system prompt, then user / assistant / user ... turns."""
    roles = ["user", "assistant"]
    return [{"role": "system", "content": system}] + [
        {"role": roles[i % 2], "content": text} for i, text in enumerate(turns)]


TURNS = [
    "Hi, I bought the Ridgeline 2 tent last week.",
    "Great choice. How can I help with your Ridgeline 2?",
    "One of the zips is stuck. Is that covered?",
    "Yes: zips are covered by the five-year warranty. What is your order number?",
    "It is NW-204518. Can you send a new inner tent?",
    "I can: a new inner tent ships today, express and free of charge.",
    "Thanks. Should I send the old one back?",
    "No need; please recycle it or keep it as a spare.",
    "Great. And how do I clean the flysheet?",
]

SCENARIOS: dict[str, Scenario] = {
    "three requests (text)": Scenario(
        "three requests (text)",
        "R1 = S+F+question, R2 = S+F+another question, R3 = S+manual+question: R2 matches S+F, "
        "R3 matches S (DESIGN.md's walk, ~1/5 size).",
        [("R1", _chat(SYSTEM + "\n\n" + FEW_SHOT, "My sleeping bag zip broke. What now?")),
         ("R2", _chat(SYSTEM + "\n\n" + FEW_SHOT, "How long does express delivery take?")),
         ("R3", _chat(SYSTEM + "\n\n" + MANUAL, "Which pole goes over the other?"))]),
    "shared system prompt": Scenario(
        "shared system prompt",
        "Four users ask one question each under the same system prompt S: "
        "after the first, each matches S and prefills only its question.",
        [(f"user{i}", _chat(SYSTEM, q)) for i, q in enumerate([
            "Do you ship to Norway?",
            "Can I return a stove I used once?",
            "What does the members' club cost?",
            "My boots leak after a year. Warranty?"], start=1)]),
    "multi-turn chat": Scenario(
        "multi-turn chat",
        "One conversation, five turns: each turn's prompt is the last one plus a reply and a "
        "message, so each matches the previous prompt and the path grows a node per turn: "
        "turn 5 locks it hop by hop up to the root.",
        [(f"turn{k}", _chat(SYSTEM, *TURNS[: 2 * k - 1])) for k in (1, 2, 3, 4, 5)]),
    "the same prompt twice": Scenario(
        "the same prompt twice",
        "One question asked twice. The repeat matches at most input_len - 1 tokens (SGLang "
        "computes the last prompt token again, for its logits), so its match ends one token "
        "short and splits the first request's leaf there.",
        [(f"ask{k}", _chat(SYSTEM, "Do you ship to Norway?")) for k in (1, 2)]),
}
